"""`python -m buildbay_client ...`: the `buildbay` command."""

from buildbay_client.cli import main

main()
