from cw.cli.app import main

main()
