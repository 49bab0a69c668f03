/*
 * test_fs.h — the file-system chores C tests share: make a directory with
 * its parents, remove a tree.  Header-only (static inline) so a test
 * includes it without linking anything; errors are ignored (a test that
 * needs the directory fails on its next step with a clearer message).
 */
#ifndef TL_TESTS_TEST_FS_H
#define TL_TESTS_TEST_FS_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p path (mode 0755). */
static inline void test_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
}

/* rm -rf dir (symbolic links are removed, never followed). */
static inline void test_rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX];
        int k = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (k < 0 || (size_t)k >= sizeof p)
            continue; /* a path too long to name: left in place */
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            test_rm_rf(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

#endif /* TL_TESTS_TEST_FS_H */
