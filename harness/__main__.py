from harness.cli import exit_now, main

if __name__ == "__main__":
    try:
        main()
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)
