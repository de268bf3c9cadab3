// joblock.h — a folder held by one job at a time: a run directory, a checkpoint folder.
//
// Two jobs writing one folder garble it: two runs' events in one rank-0.jsonl, one job's
// clean-up deleting the checkpoint the other is saving. So a job holds each folder it writes
// by a lock on DIR/lock, taken with flock(2) before anything is written and held until the
// job exits. The kernel drops the lock with the last process holding it, so a job that died
// (kill -9, a crash) leaves no lock behind: only the file, which the next job takes. The file
// says who took it (pid, host, when, the command), so a second job is refused with the holder
// named.
//
// One job, several processes. The lock belongs to the open file, which fork() and exec()
// share: `shardlab run` takes the run directory's lock before it starts the ranks and hands
// the descriptor down (JOBLOCK_FD_ENV names it); each rank adopts it (joblock_adopt). Ranks
// started without a launcher (mpirun, by hand) leave it to rank 0, which takes it and tells
// the others before any of them writes (lab.c).
//
// Shared. A job that only reads a checkpoint (--resume, saving elsewhere) holds its folder
// shared: any number of jobs may start from one checkpoint, and none may save into it
// meanwhile. A reader changes nothing in the folder: it takes the lock file the saving job
// made, and creates none (a folder saved before shardlab locked them has none: its reader
// holds nothing).
#ifndef SHARDLAB_JOBLOCK_H
#define SHARDLAB_JOBLOCK_H

#include "json.h"

#define JOBLOCK_FILE "lock"
#define JOBLOCK_FD_ENV "SHARDLAB_RUN_LOCK_FD"  // the run directory's lock, held by the launcher

typedef struct {
    int fd;      // DIR/lock, open (close-on-exec) while held; -1: nothing held
    int shared;
} JobLock;

// Takes dir's lock, exclusive (a job that writes dir) or shared (one that reads it). what
// names the folder in messages ("the run directory"); argv (NULL-ended) is the job's command,
// which an exclusive holder writes into the lock file. 0 when held. -1 otherwise, with one line
// appended to why; *busy is 1 when another job holds it (the line names that job), 0 when the
// lock could not be taken at all (a folder that cannot be written, a full disk, a lock file
// that is a link). A reader of a folder with no lock file holds nothing and gets 0.
int joblock_take(JobLock *l, const char *what, const char *dir, int shared, char *const *argv, StrBuf *why, int *busy);
// The lock on dir that this process inherited as descriptor fd: 0 when fd is dir's lock file
// and the lock is held through it; -1 with one line in why otherwise.
int joblock_adopt(JobLock *l, const char *what, const char *dir, int fd, StrBuf *why);
// Lets go of this process's hold: closes the descriptor, never unlocks (an adopted lock is
// the launcher's too, and stays held while the launcher lives). The kernel does it at exit.
void joblock_release(JobLock *l);

#endif
