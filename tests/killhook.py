"""``python tests/killhook.py <crawl's arguments>``: the crawl CLI, unchanged, killed at an exact file step.

The process SIGKILLs its own process group (itself and the Dask workers it started; run it with
``start_new_session=True``) just before its n-th rename/replace whose "src -> dst" matches the regex
``CRAWL_KILL_PATTERN`` (n = ``CRAWL_KILL_NTH``, default 1): Python's audit event ``os.rename`` is raised by
every atomic write's placing (``crawl.store.place_local``) and by publish's moves, so "before the n-th"
is "right after the (n-1)-th". Why: update, reprioritise, publish and the report write their files
within milliseconds of each other, too fast for a kill from outside that polls for files
(bench/crash_sweep.py, tests/test_resilience.py).

``CRAWL_KILL_SIGNAL=SIGSTOP`` stops the process group there instead (once): a writer frozen just before
its rename, alive, for a test to run another writer meanwhile and then send SIGCONT.
"""

import os
import re
import runpy
import signal
import sys
import threading

if __name__ == "__main__":  # not in the forkserver's children, which import the main module again
    pattern, nth = re.compile(os.environ["CRAWL_KILL_PATTERN"]), int(os.environ.get("CRAWL_KILL_NTH", "1"))
    sig = signal.Signals[os.environ.get("CRAWL_KILL_SIGNAL", "SIGKILL")]
    seen, lock = [0], threading.Lock()

    def hook(event: str, args: tuple) -> None:
        if event == "os.rename" and pattern.search(f"{args[0]} -> {args[1]}"):
            with lock:
                seen[0] += 1
                if seen[0] == nth:
                    os.killpg(os.getpgid(0), sig)

    sys.addaudithook(hook)
    sys.argv = ["crawl", *sys.argv[1:]]
    runpy.run_module("crawl", run_name="__main__", alter_sys=True)
