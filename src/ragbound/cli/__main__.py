"""``python -m ragbound.cli``."""

from ragbound.cli import main

main()
