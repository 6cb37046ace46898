import sys

from crawl.prestart import start_for_argv

start_for_argv(sys.argv[1:])  # the embedded cluster's forkserver first, before the CLI's imports (crawl.prestart)

from crawl.cli import main  # noqa: E402

raise SystemExit(main())
