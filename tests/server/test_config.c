/*
 * test_config.c — server_config_load(): defaults, the order of sources
 * (defaults < --config file < flags), and that every kind of bad value is
 * refused with one stderr line naming the setting, the value and what is
 * allowed.
 *
 * stderr is redirected to a temporary file around each call so that the
 * message can be checked; config files go under $TL_TEST_TMP (or /tmp).
 */
/* cmocka needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include "server/log.h"
#include "server/server.h"
#include "tests/test_fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char errbuf[4096]; /* stderr of the last load() */

/* Runs server_config_load with the NULL-terminated flags after "tlserve";
 * its stderr lands in errbuf, its stdout is discarded. */
static int load(server_config_t *cfg, ...)
{
    char *argv[64] = {"tlserve"};
    int argc = 1;
    va_list ap;
    va_start(ap, cfg);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 63;)
        argv[argc++] = a;
    va_end(ap);

    fflush(stderr);
    fflush(stdout);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    int saved_err = dup(2), saved_out = dup(1);
    dup2(fileno(tmp), 2);
    FILE *devnull = fopen("/dev/null", "w");
    dup2(fileno(devnull), 1);
    int rc = server_config_load(cfg, argc, argv);
    fflush(stderr);
    fflush(stdout);
    dup2(saved_err, 2);
    dup2(saved_out, 1);
    close(saved_err);
    close(saved_out);
    fclose(devnull);
    rewind(tmp);
    size_t n = fread(errbuf, 1, sizeof errbuf - 1, tmp);
    errbuf[n] = '\0';
    fclose(tmp);
    return rc;
}

/* Writes text to a fresh file under the test tmp dir; returns its path. */
static const char *write_file(const char *name, const char *text)
{
    static char path[1024];
    const char *dir = getenv("TL_TEST_TMP");
    if (!dir || !*dir)
        dir = "/tmp";
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/test_config_%d_%s", dir, (int)getpid(), name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *tmpdir_or_tmp(void)
{
    const char *t = getenv("TL_TEST_TMP");
    return t && *t ? t : "/tmp";
}

/* Asserts the last load failed with one line containing every string given. */
static void expect_error(int rc, ...)
{
    if (rc != -1)
        fail_msg("expected -1, got %d (stderr: %s)", rc, errbuf);
    const char *nl = strchr(errbuf, '\n');
    if (!nl || nl[1] != '\0')
        fail_msg("expected exactly one line on stderr, got: '%s'", errbuf);
    va_list ap;
    va_start(ap, rc);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        if (!strstr(errbuf, s))
            fail_msg("stderr '%s' does not mention '%s'", errbuf, s);
    va_end(ap);
}

static void test_defaults(void **state)
{
    (void)state;
    server_config_t c;
    assert_int_equal(load(&c, NULL), 0);
    assert_string_equal(errbuf, "");
    assert_string_equal(c.model_dir, "");
    assert_string_equal(c.model_root, "");
    assert_string_equal(c.bind, "127.0.0.1");
    assert_string_equal(c.admin_bind, "127.0.0.1");
    assert_int_equal(c.port, 7070);
    assert_int_equal(c.admin_port, 7071);
    assert_string_equal(c.admin_token, "");
    assert_int_equal(c.workers, 0);
    assert_int_equal(c.load_threads, 0);
    assert_int_equal(c.max_inflight, 128);
    assert_int_equal(c.max_connections, 1024);
    assert_int_equal(c.max_frame_bytes, 16 << 20);
    assert_int_equal(c.max_output_bytes, 128 << 20);
    assert_int_equal(c.max_unsent_bytes, 256 << 10);
    assert_int_equal(c.send_buffer_bytes, 256 << 10);
    assert_int_equal(c.frame_timeout_ms, 10000);
    assert_int_equal(c.idle_timeout_ms, 20000);
    assert_int_equal(c.send_timeout_ms, 10000);
    assert_false(c.force_epoll);
    assert_string_equal(c.log_level, "info");
    assert_int_equal(server_log_level, LL_INFO);
}

static void test_flags(void **state)
{
    (void)state;
    server_config_t c;
    assert_int_equal(load(&c, "--model", "/m/1", "--port=9000", "--admin_port", "9001", "--bind",
                          "::1", "--admin-bind=0.0.0.0", "--admin-token", "s3cret", "--workers",
                          "4", "--load-threads=2", "--max-inflight", "8", "--max-connections", "16",
                          "--max-frame-bytes", "1024", "--idle-timeout-ms", "50", "--force-epoll",
                          "--frame-timeout-ms", "60", "--send-timeout-ms", "70",
                          "--max-output-bytes", "65536",
                          "--log-level", "debug", NULL),
                     0);
    assert_string_equal(c.model_dir, "/m/1");
    assert_int_equal(c.port, 9000);
    assert_int_equal(c.admin_port, 9001);
    assert_string_equal(c.bind, "::1");
    assert_string_equal(c.admin_bind, "0.0.0.0");
    assert_string_equal(c.admin_token, "s3cret");
    assert_int_equal(c.workers, 4);
    assert_int_equal(c.load_threads, 2);
    assert_int_equal(c.max_inflight, 8);
    assert_int_equal(c.max_connections, 16);
    assert_int_equal(c.max_frame_bytes, 1024);
    assert_int_equal(c.idle_timeout_ms, 50);
    assert_int_equal(c.frame_timeout_ms, 60);
    assert_int_equal(c.send_timeout_ms, 70);
    assert_int_equal(c.max_output_bytes, 65536);
    assert_true(c.force_epoll);
    assert_int_equal(server_log_level, LL_DEBUG);

    /* Last one wins; a bool takes a value only after '='. */
    assert_int_equal(load(&c, "--port", "1", "--port", "2", "--force-epoll=no", NULL), 0);
    assert_int_equal(c.port, 2);
    assert_false(c.force_epoll);
    assert_int_equal(server_log_level, LL_INFO);
}

static void test_file_then_flags(void **state)
{
    (void)state;
    const char *path = write_file("ok.ini", "; tlserve test config\n"
                                            "[server]\n"
                                            "port = 8000\n"
                                            "admin_port = 8001\n"
                                            "admin-token = from-file\n"
                                            "workers = 3\n"
                                            "force_epoll = yes\n"
                                            "bind = 0.0.0.0\n"
                                            "log-level = warn ; an inline comment\n");
    server_config_t c;
    /* The flag before --config still wins over the file. */
    assert_int_equal(
        load(&c, "--port", "9000", "--config", path, "--workers=5", "--force-epoll=false", NULL),
        0);
    assert_int_equal(c.port, 9000);       /* flag */
    assert_int_equal(c.admin_port, 8001); /* file */
    assert_string_equal(c.admin_token, "from-file");
    assert_int_equal(c.workers, 5);         /* flag */
    assert_false(c.force_epoll);            /* flag */
    assert_string_equal(c.bind, "0.0.0.0"); /* file */
    assert_int_equal(c.max_inflight, 128);  /* default */
    assert_int_equal(server_log_level, LL_WARN);

    assert_int_equal(load(&c,
                          "--config="
                          "/nonexistent/x.ini",
                          NULL),
                     -1);
    expect_error(-1, "/nonexistent/x.ini", "cannot open", NULL);
    unlink(path);
}

static void test_bad_flags(void **state)
{
    (void)state;
    server_config_t c;
    expect_error(load(&c, "--port", "70000", NULL), "--port", "70000", "1..65535", NULL);
    expect_error(load(&c, "--admin-port=0", NULL), "--admin-port", "0", "1..65535", NULL);
    expect_error(load(&c, "--workers", "abc", NULL), "--workers", "'abc'", "not an integer",
                 "0..1024", NULL);
    expect_error(load(&c, "--max-frame-bytes", "12x", NULL), "--max-frame-bytes", "'12x'",
                 "1024..16777216", NULL);
    expect_error(load(&c, "--max-frame-bytes", "99999999999999999999", NULL), "--max-frame-bytes",
                 "99999999999999999999", NULL);
    expect_error(load(&c, "--max-inflight", "", NULL), "--max-inflight", "''", NULL);
    expect_error(load(&c, "--idle-timeout-ms", " 5", NULL), "--idle-timeout-ms", NULL);
    expect_error(load(&c, "--bind", "999.1.1.1", NULL), "--bind", "999.1.1.1", "IPv4", NULL);
    expect_error(load(&c, "--admin-bind", "localhost", NULL), "--admin-bind", "localhost", NULL);
    expect_error(load(&c, "--log-level", "loud", NULL), "--log-level", "loud", "debug", NULL);
    expect_error(load(&c, "--force-epoll=maybe", NULL), "--force-epoll", "maybe", "true/false",
                 NULL);
    expect_error(load(&c, "--sync-topk", "0", NULL), "--sync-topk", "out of range", "0.001..1",
                 NULL); /* a real bound under 1 holds (0 would send nothing, ever) */
    expect_error(load(&c, "--gate-max-psi", "nan", NULL), "--gate-max-psi", "not a number", NULL);
    expect_error(load(&c, "--nope", "1", NULL), "unknown flag", "--nope", NULL);
    expect_error(load(&c, "--port", NULL), "--port", "needs a value", NULL);
    expect_error(load(&c, "stray", NULL), "unexpected argument", "stray", NULL);
    expect_error(load(&c, "--config", NULL), "--config", NULL);

    char longtok[300];
    memset(longtok, 'x', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = '\0';
    expect_error(load(&c, "--admin-token", longtok, NULL), "--admin-token", "too long", "255",
                 NULL);
}

static void test_bad_file(void **state)
{
    (void)state;
    server_config_t c;
    struct {
        const char *text;
        const char *want[4];
    } cases[] = {
        {"[server]\nport = 1\nprot = 2\n", {":3:", "unknown setting", "prot", NULL}},
        {"[server]\nport = -1\n", {":2:", "port", "-1", "1..65535"}},
        {"[server]\nworkers = many\n", {":2:", "workers", "many", "0..1024"}},
        {"[server]\nadmin_bind = 1.2.3.4.5\n", {":2:", "admin-bind", "1.2.3.4.5", NULL}},
        {"port = 1\n", {":1:", "outside a section", "port", NULL}},
        {"[router]\nport = 1\n", {":2:", "[router]", "unknown section", NULL}},
        {"[server]\nthis is not ini\n", {":2:", "not an INI line", NULL}},
        {"[server]\nport = 1\nworkers = 2\nport = 3\n", {":4:", "'port'", "second time", NULL}},
        {"[server]\nadmin_bind = ::1\nadmin-bind = ::1\n", {":3:", "admin-bind", "second", NULL}},
        {"[server]\nadmin_token = abc # note\n", {":2:", "admin-token", "holds ' #'", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_file("bad.ini", cases[i].text);
        int rc = load(&c, "--config", path, NULL);
        expect_error(rc, path, NULL);
        for (int k = 0; k < 4 && cases[i].want[k]; k++)
            if (!strstr(errbuf, cases[i].want[k]))
                fail_msg("case %zu: stderr '%s' does not mention '%s'", i, errbuf,
                         cases[i].want[k]);
        unlink(path);
    }

    /* inih would cut a line at its 200-byte buffer and read the rest as a
     * line of its own: the token cut short, and "workers = 1" set by a line
     * nobody wrote.  Refused whole; a line of 199 bytes (its end included)
     * still reads. */
    char text[512];
    snprintf(text, sizeof text, "[server]\nadmin_token = %0185d workers = 1\nport = 9\n", 0);
    const char *path = write_file("long.ini", text);
    expect_error(load(&c, "--config", path, NULL), ":2:", "212 bytes", "over the 199",
                 "admin_token_file", NULL);
    char comment[199];
    memset(comment, 'c', sizeof comment - 1);
    comment[0] = ';';
    comment[sizeof comment - 1] = '\0'; /* 198 bytes and the '\n': 199 */
    snprintf(text, sizeof text, "[server]\n%s\nworkers = 3\n", comment);
    path = write_file("long.ini", text);
    assert_int_equal(load(&c, "--config", path, NULL), 0);
    assert_int_equal(c.workers, 3);
    unlink(path);
}

/* A --config that is not a regular file is refused, not read as empty. */
static void test_config_not_a_file(void **state)
{
    (void)state;
    server_config_t c;
    const char *path = write_file("dir.ini", "");
    char dir[1100];
    snprintf(dir, sizeof dir, "%s.d", path);
    unlink(path);
    assert_int_equal(mkdir(dir, 0755), 0);
    expect_error(load(&c, "--config", dir, NULL), "--config", dir, "directory",
                 "not a regular file", NULL);
    rmdir(dir);
    expect_error(load(&c, "--config", "/dev/null", NULL), "/dev/null", "not a regular file",
                 NULL);
    expect_error(load(&c, "--config", dir, NULL), dir, "cannot open", NULL);
}

/* The admin token from a file, the environment or a flag (warned). */
static void test_admin_token_sources(void **state)
{
    (void)state;
    server_config_t c;
    unsetenv("TLSERVE_ADMIN_TOKEN");

    const char *path = write_file("token", "s3cret\n");
    char file[1100];
    snprintf(file, sizeof file, "%s", path);
    chmod(file, 0600);
    assert_int_equal(load(&c, "--admin-token-file", file, NULL), 0);
    assert_string_equal(c.admin_token, "s3cret");
    assert_string_equal(errbuf, "");

    write_file("token", "crlf\r\n");
    chmod(file, 0644);
    assert_int_equal(load(&c, "--admin-token-file", file, NULL), 0);
    assert_string_equal(c.admin_token, "crlf");
    if (!strstr(errbuf, "readable by every local user") || !strstr(errbuf, file))
        fail_msg("no warning about a world-readable token file: '%s'", errbuf);

    write_file("token", "\n");
    expect_error(load(&c, "--admin-token-file", file, NULL), "--admin-token-file", file, "empty",
                 NULL);
    write_file("token", "two\nlines\n");
    expect_error(load(&c, "--admin-token-file", file, NULL), file, "control character", NULL);
    unlink(file);
    expect_error(load(&c, "--admin-token-file", file, NULL), file, "cannot open", NULL);

    write_file("token", "x\n");
    expect_error(load(&c, "--admin-token-file", file, "--admin-token", "y", NULL),
                 "--admin-token-file", "give one", NULL);

    setenv("TLSERVE_ADMIN_TOKEN", "fromenv", 1);
    assert_int_equal(load(&c, NULL), 0);
    assert_string_equal(c.admin_token, "fromenv");
    assert_string_equal(errbuf, "");
    expect_error(load(&c, "--admin-token-file", file, NULL), "give one", NULL);
    unsetenv("TLSERVE_ADMIN_TOKEN");
    unlink(file);

    assert_int_equal(load(&c, "--admin-token", "onargv", NULL), 0);
    assert_string_equal(c.admin_token, "onargv");
    if (!strstr(errbuf, "/proc/PID/cmdline") || !strstr(errbuf, "--admin-token-file"))
        fail_msg("no warning about a token on the command line: '%s'", errbuf);
    expect_error(load(&c, "--admin-token", " padded", NULL), "--admin-token", "blank", NULL);
}

/* --model-root: the root must be a directory; --model must resolve to a
 * path strictly under it ('..' escapes, symlinks out, the root itself and a
 * sibling sharing its prefix are refused); server_path_under_root, which
 * the admin load uses too, gives the resolved path. */
static void test_model_root(void **state)
{
    (void)state;
    server_config_t c;
    const char *tmp = getenv("TL_TEST_TMP");
    char base[512], models[600], inside[700], models2[600], outside[600], p[900], q[900];
    snprintf(base, sizeof base, "%s/test_config_%d_root", tmp && *tmp ? tmp : "/tmp",
             (int)getpid());
    test_rm_rf(base);
    snprintf(models, sizeof models, "%s/models", base);
    snprintf(inside, sizeof inside, "%s/a/1", models);
    snprintf(models2, sizeof models2, "%s/models2/x", base);
    snprintf(outside, sizeof outside, "%s/outside", base);
    test_mkdir_p(inside);
    test_mkdir_p(models2);
    test_mkdir_p(outside);
    snprintf(p, sizeof p, "%s/link_out", models);
    assert_int_equal(symlink("../outside", p), 0);
    snprintf(p, sizeof p, "%s/link_in", models);
    assert_int_equal(symlink("a/1", p), 0);
    snprintf(p, sizeof p, "%s/rootlink", base);
    assert_int_equal(symlink("models", p), 0);

    /* The root itself. */
    snprintf(p, sizeof p, "%s/missing", base);
    expect_error(load(&c, "--model-root", p, NULL), "--model-root", p, "cannot resolve", NULL);
    snprintf(p, sizeof p, "%s/a/1/file", models);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    expect_error(load(&c, "--model-root", p, NULL), "--model-root", p, "not a directory", NULL);

    /* Inside: directly, through a symlink in the root, through a root that
     * is itself a symlink, and under "/". */
    assert_int_equal(load(&c, "--model-root", models, "--model", inside, NULL), 0);
    assert_string_equal(c.model_root, models);
    assert_string_equal(c.model_dir, inside);
    assert_string_equal(errbuf, "");
    snprintf(p, sizeof p, "%s/link_in", models);
    assert_int_equal(load(&c, "--model-root", models, "--model", p, NULL), 0);
    snprintf(q, sizeof q, "%s/rootlink", base);
    assert_int_equal(load(&c, "--model-root", q, "--model", inside, NULL), 0);
    assert_int_equal(load(&c, "--model-root", "/", "--model", outside, NULL), 0);
    /* Without --model either may be given alone; without a root, anything. */
    assert_int_equal(load(&c, "--model-root", models, NULL), 0);
    assert_int_equal(load(&c, "--model", outside, NULL), 0);

    /* Outside: the config error names both. */
    const char *bad[] = {outside, models, "..", "../outside", "link_out", "../models2/x",
                         "nothing"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i][0] == '/')
            snprintf(p, sizeof p, "%s", bad[i]);
        else
            snprintf(p, sizeof p, "%s/%s", models, bad[i]);
        expect_error(load(&c, "--model-root", models, "--model", p, NULL), "--model-root",
                     "--model", models, p, NULL);
    }
    assert_int_equal(load(&c, "--model", outside, "--model-root", "/", NULL), 0);
    expect_error(load(&c, "--model", "/", "--model-root", "/", NULL), "--model-root", NULL);

    /* The helper: the resolved path, a '/' boundary, a size limit. */
    char real[1024], why[1024];
    snprintf(p, sizeof p, "%s/link_in", models);
    assert_int_equal(server_path_under_root(models, p, real, sizeof real, why, sizeof why), 0);
    char want[PATH_MAX];
    assert_non_null(realpath(inside, want));
    assert_string_equal(real, want);
    assert_int_equal(server_path_under_root(models, models2, real, sizeof real, why, sizeof why),
                     -1);
    if (!strstr(why, "not under the model root"))
        fail_msg("why: '%s'", why);
    snprintf(p, sizeof p, "%s/link_out", models);
    assert_int_equal(server_path_under_root(models, p, real, sizeof real, why, sizeof why), -1);
    assert_non_null(realpath(outside, want));
    if (!strstr(why, want) || !strstr(why, p))
        fail_msg("why does not name '%s' and '%s': '%s'", p, want, why);
    assert_int_equal(server_path_under_root(models, inside, real, 4, why, sizeof why), -1);
    test_rm_rf(base);
}

/* --model-repo: an existing directory, not with --model, under --model-root
 * when set (then kept as its real path); --model-name needs it and is a
 * model directory name. */
static void test_model_repo(void **state)
{
    (void)state;
    server_config_t c;
    char base[512], repo[600], real[PATH_MAX], p[700];
    snprintf(base, sizeof base, "%s/test_config_%d_repo", tmpdir_or_tmp(), (int)getpid());
    test_rm_rf(base);
    snprintf(repo, sizeof repo, "%s/root/repo", base);
    test_mkdir_p(repo);
    assert_int_equal(load(&c, NULL), 0);
    assert_string_equal(c.model_repo, "");
    assert_string_equal(c.model_name, "");
    assert_int_equal(load(&c, "--model-repo", repo, "--model-name", "m.1_x-y", NULL), 0);
    assert_string_equal(c.model_repo, repo);
    assert_string_equal(c.model_name, "m.1_x-y");
    snprintf(p, sizeof p, "%s/missing", base);
    expect_error(load(&c, "--model-repo", p, NULL), "--model-repo", p, "cannot resolve", NULL);
    expect_error(load(&c, "--model-repo", repo, "--model", repo, NULL), "--model and --model-repo",
                 NULL);
    expect_error(load(&c, "--model-name", "m", NULL), "--model-name", "needs --model-repo", NULL);
    expect_error(load(&c, "--model-repo", repo, "--model-name", "a/b", NULL), "--model-name",
                 "a/b", NULL);
    expect_error(load(&c, "--model-repo", repo, "--model-name", ".hidden", NULL), "--model-name",
                 NULL);
    snprintf(p, sizeof p, "%s/root", base);
    assert_int_equal(load(&c, "--model-root", p, "--model-repo", repo, NULL), 0);
    assert_non_null(realpath(repo, real));
    assert_string_equal(c.model_repo, real);
    expect_error(load(&c, "--model-root", repo, "--model-repo", p, NULL), "--model-repo",
                 "not under --model-root", NULL);
    test_rm_rf(base);
}

/* "--gate false" (a bool given its value as the next argument): refused
 * with the '=' form to use, not as a stray argument 'false'. */
static void test_bool_value_without_equals(void **state)
{
    (void)state;
    server_config_t c;
    expect_error(load(&c, "--gate", "false", NULL), "--gate false", "--gate=false",
                 "alone means true", NULL);
    expect_error(load(&c, "--online", "on", "--port", "7171", NULL), "--online=on", NULL);
    assert_int_equal(load(&c, "--gate=false", "--online", NULL), 0);
    assert_false(c.gate);
    assert_true(c.online);
}

/* The data plane and the admin plane on one address and port: refused at
 * the command line, not at the second listen ("address in use"). */
static void test_same_port_for_both_planes(void **state)
{
    (void)state;
    server_config_t c;
    expect_error(load(&c, "--port", "7171", "--admin-port", "7171", NULL), "--port",
                 "--admin-port", "7171", NULL);
    expect_error(load(&c, "--port", "7171", "--admin-port", "7171", "--bind", "0.0.0.0",
                      "--admin-bind", "127.0.0.2", NULL),
                 "both 7171", NULL);
    assert_int_equal(load(&c, "--port", "7171", "--admin-port", "7171", "--bind", "127.0.0.1",
                          "--admin-bind", "127.0.0.2", NULL),
                     0); /* two addresses: no clash */
    assert_int_equal(load(&c, "--port", "7171", "--admin-port", "7172", NULL), 0);
}

static void test_help(void **state)
{
    (void)state;
    server_config_t c;
    assert_int_equal(load(&c, "--help", NULL), 1);
    /* --help wins even after a bad flag. */
    assert_int_equal(load(&c, "--port", "0", "--help", NULL), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_file_then_flags), cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_bad_file),        cmocka_unit_test(test_help),
        cmocka_unit_test(test_config_not_a_file), cmocka_unit_test(test_admin_token_sources),
        cmocka_unit_test(test_model_root),      cmocka_unit_test(test_model_repo),
        cmocka_unit_test(test_same_port_for_both_planes),
        cmocka_unit_test(test_bool_value_without_equals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
