"""``python -m kernelaudit`` is the ``kernelaudit`` command."""

from .cli import main

if __name__ == "__main__":
    main()
