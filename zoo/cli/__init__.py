"""The command-line commands."""
