"""Running a checkpoint's objective: answering about an image (LLaVA), detecting objects (YOLOS), and
the device check of the commands (sampling and beam search are :mod:`zoo.models`')."""
