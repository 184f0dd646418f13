"""``python -m zoo <command> key=value ...``: the commands are listed in :mod:`zoo.cli.commands`."""

from zoo.cli.commands import main

if __name__ == "__main__":
    main()
