"""The jobs scripts/client-checks.py has RQ run: RQ's workers import a job's function by its
module's name, so it cannot live in the script that enqueues it (`__main__`)."""


def square(x):
    return x * x
