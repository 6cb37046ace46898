from crawl.cli import main

raise SystemExit(main())
