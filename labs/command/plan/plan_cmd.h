// plan_cmd.h — `shardlab plan` (plan_cmd.c): the bytes each GPU holds for a model and a
// layout, from the formulas the labs are graded against, and --check against a real run.
#ifndef SHARDLAB_PLAN_CMD_H
#define SHARDLAB_PLAN_CMD_H

// `shardlab plan LAB [options]`; returns the exit status (0, 1 the check differs, 2 usage).
int plan_main(int argc, char **argv);

#endif
