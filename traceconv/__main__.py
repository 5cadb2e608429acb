from traceconv_cli.app import main

main()
