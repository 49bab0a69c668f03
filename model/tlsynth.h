/*
 * tlsynth.h — the subcommands of tlsynth, one file each:
 *
 *   tlsynth data  ...   click samples from a planted LR/FM model (tlsynth.c;
 *                       also the default when no subcommand is named)
 *   tlsynth model ...   a synthetic model of any kind written as a snapshot
 *                       (tlsynth_model.c)
 *
 * Each takes its own argv (argv[0] = the subcommand's name) and returns the
 * process exit status: 0 ok, 1 failure, 2 usage error.
 */
#ifndef TL_MODEL_TLSYNTH_H
#define TL_MODEL_TLSYNTH_H

int tlsynth_model_main(int argc, char **argv);

#endif /* TL_MODEL_TLSYNTH_H */
