"""`python -m buildbay ...`: the `buildbay` command (the client's, with the server's operator
commands added through their entry point), as the tests start servers with it."""

from buildbay_client.cli import main

main()
