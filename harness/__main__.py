from core.interrupts import exit_interrupted_at_start, keep_every_interrupt
from core.parent import take_back_ctrl_c

try:
    keep_every_interrupt()  # a Ctrl-C swallowed in a callback is sent again
    take_back_ctrl_c()  # before anything slow: a SIGINT during the imports and the pre-flight is not lost
    from harness.cli import exit_now, main
except KeyboardInterrupt:
    exit_interrupted_at_start("\ninterrupted before the run started: nothing was measured")

if __name__ == "__main__":
    try:
        main()
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)
