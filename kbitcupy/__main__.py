"""python -m kbitcupy ... (and the `kbitcupy` console script)."""
import sys


def main(argv=None) -> int:
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
