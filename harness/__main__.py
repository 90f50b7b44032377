import signal
import sys

# Before anything slow: a background job of a script (`python -m harness … &`) starts with SIGINT
# ignored, so a Ctrl-C (or kill -INT) during the imports and the pre-flight would be lost and the
# run would go on. harness.cli.main keeps it so for the run.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    from harness.cli import exit_now, main
except KeyboardInterrupt:
    print("\ninterrupted before the run started: nothing was measured", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    try:
        main()
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)
