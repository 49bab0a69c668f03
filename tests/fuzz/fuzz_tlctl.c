/*
 * fuzz_tlctl.c — tlctl's handling of an admin plane's reply (untrusted: any
 * process may listen on the port): the status line and header parse, then
 * the body as JSON walked the way the tables read it (missing fields,
 * wrong types).  Output is discarded.
 */
#define main tlctl_main
int tlctl_main(int argc, char **argv);
#include "server/tlctl.c"
#undef main

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    int code;
    size_t at;
    if (parse_reply(buf, size, &code, &at) == 0) {
        if (code < 100 || code > 599 || at > size)
            abort();
        json_t *j = json_loads(buf + at, 0, NULL);
        if (j) {
            json_t *m;
            size_t i;
            long long sum = 0;
            json_array_foreach(json_object_get(j, "versions"), i, m)
            {
                sum += jint(m, "version");
                sum += (long long)strlen(jstr(m, "state", "?")) +
                       (long long)strlen(jstr(m, "reason", ""));
            }
            json_array_foreach(json_object_get(j, "models"), i, m) sum +=
                jint(m, "keys") + (long long)strlen(jstr(m, "name", "?"));
            json_t *prev = NULL;
            O.json = false;
            FILE *saved = stdout;
            stdout = fopen("/dev/null", "w");
            if (stdout) {
                diff_states("m", &prev, j);
                diff_states("m", &prev, j);
                fclose(stdout);
            }
            stdout = saved;
            json_decref(prev);
            json_decref(j);
            (void)sum;
        }
    }
    free(buf);
    return 0;
}
