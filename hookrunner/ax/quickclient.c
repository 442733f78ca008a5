/* The quick client in C: what Claude Code starts for each hook call (issue 44, D394).
 *
 * usage: hookrunner-client PYTHON QUICKCLIENT_PY RUNNER fire EVENT [options]
 *
 * The same protocol as quickclient.py, which stays the reference: a 4-byte big-endian
 * length, then NUL-separated words (the build "PREFIX:INODE:MTIME_NS" of QUICKCLIENT_PY,
 * the directory, the umask, the argument count, the arguments after RUNNER, then the
 * environment's NAME=value entries), this process's descriptors 0, 1 and 2 passed with
 * the first 4096 bytes (SCM_RIGHTS). The warm runner answers '+' (it runs the call: then
 * stdin and stdout are let go, and its status byte is this client's exit status) or '-'
 * (another build). PREFIX is the installation, dirname(dirname(PYTHON)); the socket is
 * $XDG_RUNTIME_DIR (else /tmp)/hookrunner-UID/fire-FNV1A32(PREFIX).sock, in a directory
 * that must be this user's alone.
 *
 * Never fails open: no server, a directory not private, another build or a connection
 * refused before '+', and this client becomes the Python client (exec PYTHON -I -S
 * QUICKCLIENT_PY RUNNER ...), which starts a server and runs the full runner. If that
 * cannot be executed (the installation is gone), it exits 127 with a message; the
 * installed command turns that into a block on an event that can block. A server that
 * took the call and broke off gives 2 on PreToolUse/UserPromptSubmit, else 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

static char *body;
static size_t used, room;

static void put(const char *word, int last) {
    size_t n = strlen(word) + (last ? 0 : 1);
    if (used + n + 4 > room) {
        room = (used + n + 4) * 2;
        body = realloc(body, room);
        if (body == NULL) {
            exit(1);
        }
    }
    memcpy(body + 4 + used, word, n); /* the NUL separator comes with the word */
    used += n;
}

static uint32_t fnv1a(const char *text) {
    uint32_t value = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        value = (value ^ *p) * 16777619u;
    }
    return value;
}

static int fallback(char **argv, int argc) {
    char **args = calloc((size_t)argc + 4, sizeof(char *));
    if (args == NULL) {
        return 1;
    }
    args[0] = argv[1];
    args[1] = "-I";
    args[2] = "-S";
    for (int i = 2; i < argc; i++) {
        args[i + 1] = argv[i];
    }
    execv(argv[1], args);
    fprintf(stderr, "hookrunner: cannot run %s (%s): the runner's installation is gone\n",
            argv[1], strerror(errno));
    return 127;
}

static int blocking(int argc, char **argv) {
    return argc > 5 && (strcmp(argv[5], "PreToolUse") == 0 ||
                        strcmp(argv[5], "UserPromptSubmit") == 0);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: hookrunner-client PYTHON QUICKCLIENT RUNNER fire EVENT ...\n");
        return 2;
    }
    char prefix[4096], dir[4200], path[4300], word[4200], cwd[4096];
    snprintf(prefix, sizeof prefix, "%s", argv[1]);
    for (int up = 0; up < 2; up++) {
        char *slash = strrchr(prefix, '/');
        if (slash == NULL) {
            return fallback(argv, argc);
        }
        *slash = '\0';
    }
    if (prefix[0] == '\0') {
        snprintf(prefix, sizeof prefix, "/");
    }
    const char *base = getenv("XDG_RUNTIME_DIR");
    if (base == NULL || base[0] == '\0') {
        base = "/tmp";
    }
    unsigned uid = (unsigned)getuid();
    snprintf(path, sizeof path, "%s/hookrunner-%u/fire-%08x.sock", base, uid, fnv1a(prefix));
    if (strlen(path) > 100) {
        base = "/tmp";
        snprintf(path, sizeof path, "%s/hookrunner-%u/fire-%08x.sock", base, uid, fnv1a(prefix));
    }
    snprintf(dir, sizeof dir, "%s/hookrunner-%u", base, uid);
    struct stat info;
    if (lstat(dir, &info) != 0 || info.st_uid != uid || (info.st_mode & 077) != 0 ||
        !S_ISDIR(info.st_mode) || stat(path, &info) != 0 || stat(argv[2], &info) != 0 ||
        getcwd(cwd, sizeof cwd) == NULL) {
        return fallback(argv, argc);
    }
    unsigned long long mtime =
        (unsigned long long)info.st_mtim.tv_sec * 1000000000ull + (unsigned long long)info.st_mtim.tv_nsec;
    snprintf(word, sizeof word, "%s:%llu:%llu", prefix, (unsigned long long)info.st_ino, mtime);
    put(word, 0);
    put(cwd, 0);
    mode_t mask = umask(0);
    umask(mask);
    snprintf(word, sizeof word, "%u", (unsigned)mask);
    put(word, 0);
    snprintf(word, sizeof word, "%d", argc - 4);
    put(word, 0);
    int words = 0;
    for (char **e = environ; *e; e++) {
        words += (*e)[0] != '=' && strchr(*e, '=') != NULL;
    }
    for (int i = 4; i < argc; i++) {
        put(argv[i], i == argc - 1 && words == 0);
    }
    for (char **e = environ; *e; e++) {
        if ((*e)[0] != '=' && strchr(*e, '=') != NULL) {
            put(*e, --words == 0);
        }
    }
    uint32_t size = (uint32_t)used;
    unsigned char head[4] = {size >> 24, size >> 16, size >> 8, size};
    memcpy(body, head, 4);
    size_t total = used + 4;

    int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", path);
    if (conn < 0 || connect(conn, (struct sockaddr *)&address, sizeof address) != 0) {
        return fallback(argv, argc);
    }
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    size_t first = total < 4096 ? total : 4096;
    struct iovec vector = {.iov_base = body, .iov_len = first};
    struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&message);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent = sendmsg(conn, &message, MSG_NOSIGNAL);
    if (sent <= 0) {
        return fallback(argv, argc);
    }
    for (size_t done = (size_t)sent; done < total;) {
        ssize_t more = send(conn, body + done, total - done, MSG_NOSIGNAL);
        if (more <= 0) {
            return fallback(argv, argc);
        }
        done += (size_t)more;
    }
    char answer = 0;
    if (recv(conn, &answer, 1, 0) != 1 || answer != '+') {
        close(conn); /* another build (it is leaving), or gone: descriptors still ours */
        return fallback(argv, argc);
    }
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) { /* the call's child owns stdin and stdout now */
        dup2(devnull, 0);
        dup2(devnull, 1);
        close(devnull);
    }
    unsigned char status = 0;
    ssize_t got;
    do {
        got = recv(conn, &status, 1, 0);
    } while (got < 0 && errno == EINTR);
    if (got == 1) {
        return status;
    }
    fprintf(stderr, "hookrunner: the warm runner broke off before answering\n");
    return blocking(argc, argv) ? 2 : 1;
}
