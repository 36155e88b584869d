"""The ``kio`` console script (also ``python -m kio``)."""
import sys


def main(argv=None):
    from kio.cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
