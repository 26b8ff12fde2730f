"""One `ncclsweep run`: the loop, the golden reference, progress, executors, the driver lock,
the all-reduce pre-screen and the one-off `bench` command."""
