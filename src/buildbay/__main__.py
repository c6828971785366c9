from buildbay.cli import main

main()
