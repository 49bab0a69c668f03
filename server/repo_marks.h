/*
 * repo_marks.h — the file that keeps a model's policy marks across a
 * restart: the admin's pin, the rolled-back versions, and the refusals a
 * restart could not make again by itself (the admin's; the validation
 * gate's: its shadow scoring compares live traffic, which a restarted
 * server has not seen yet, so a version it refused would pass; and the
 * lineage check's, repo_chain.c: a restart has no active version to check
 * a delta against, so it would serve a delta of another line).  A
 * refusal for bad files is not kept: the restart's load finds it again.
 * Pure: formatting and parsing only (repo_persist.c reads and writes it).
 *
 * FORMAT (text, one mark a line, '\n' ended; written whole by rename)
 *   tlserve-marks 1 <model>
 *   pinned <version>                            at most one
 *   rolled_back <version>                       ascending, at most REPO_ROLLED_BACK_MAX
 *   refused <version> admin <reason>            ascending with the gate's,
 *   refused <version> gate <sig> <reason>       at most REPO_REFUSED_MAX
 *   refused <version> lineage <sig> <reason>
 *   end <count of the marks above>
 * The marks come in this order (pinned, rolled_back, refused); a reason,
 * when there is one, follows its kind (or signature) after one space.
 * Versions are decimal, 1 .. 2^63; sig is 16 hex digits (the signature
 * of the version's own chain, repo.c: KEPT REFUSALS, so the refusal is
 * forgotten when those files change; 0 until the watcher's next scan signs
 * it); a reason is printable text without '\n', at most
 * REPO_MARKS_REASON_MAX bytes.
 */
#ifndef TL_SERVER_REPO_MARKS_H
#define TL_SERVER_REPO_MARKS_H

#include "repo.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REPO_MARKS_REASON_MAX 1024
#define REPO_MARKS_FILE_MAX (64 * 1024 + REPO_REFUSED_MAX * (REPO_MARKS_REASON_MAX + 64))

typedef struct repo_marks {
    uint64_t pinned; /* 0: none */
    unsigned n_rolled_back;
    uint64_t rolled_back[REPO_ROLLED_BACK_MAX];
    unsigned n_refused;
    struct repo_marked_refusal {
        uint64_t version;
        bool by_admin;   /* else the gate's or the lineage's */
        bool by_lineage; /* the lineage check's (repo_chain.c), not the gate's */
        uint64_t sig;    /* the gate's or the lineage's: prefix signature at refusal */
        char reason[REPO_MARKS_REASON_MAX + 1];
    } refused[REPO_REFUSED_MAX];
} repo_marks_t;

/* Writes m of model into buf[0, cap): the length, or 0 when cap is too
 * small (REPO_MARKS_FILE_MAX always fits).  A reason longer than
 * REPO_MARKS_REASON_MAX is cut; '\n' and other control bytes in it become
 * spaces.  Lists are written as given (the caller keeps them ascending). */
size_t repo_marks_format(const repo_marks_t *m, const char *model, char *buf, size_t cap);

/* Parses buf[0, len) as the marks of model into *m: 0, or -EINVAL with why
 * naming the line and what was wrong (another model, an unknown mark, a
 * bad number, a list not ascending or too long, a missing or wrong end). */
int repo_marks_parse(const char *buf, size_t len, const char *model, repo_marks_t *m, char *why,
                     size_t why_len);

#endif
