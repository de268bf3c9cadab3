// whatif_cmd.h — `shardlab whatif` (whatif_cmd.c): a finished run's step projected onto
// another interconnect and GPU, from the bytes of its collectives and the overlap it achieved.
#ifndef SHARDLAB_WHATIF_CMD_H
#define SHARDLAB_WHATIF_CMD_H

// `shardlab whatif RUN_DIR [options]`; returns the exit status (0, 2 usage).
int whatif_main(int argc, char **argv);

#endif
