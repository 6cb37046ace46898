import sys

from crawl.warmup import collector_off_for_start, end_after_exit_handlers, skip_final_gc

collector_off_for_start()  # until the command's modules are imported (crawl.cli.main: collector_back_on)

# crawl.warmup's exit handler registered first, so it runs last: after multiprocessing's (registered when the
# forkserver starts, just below), which it ends the process after (end_after_exit_handlers)
skip_final_gc()

from crawl.prestart import start_for_argv  # noqa: E402

start_for_argv(sys.argv[1:])  # the embedded cluster's forkserver first, before the CLI's imports (crawl.prestart)

from crawl.cli import main  # noqa: E402

status = main()
end_after_exit_handlers(status)  # after the exit handlers, without the interpreter's finalization
raise SystemExit(status)
