from opaudit.cli import main

main()
