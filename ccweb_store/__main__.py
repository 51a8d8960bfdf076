from ccweb_store.cli import main

main()
