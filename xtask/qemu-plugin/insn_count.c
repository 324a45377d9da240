/*
 * insn_count: a QEMU TCG plugin (plugin API version 1, QEMU 7.2) that counts the guest
 * instructions executed between two marker instructions, for `cargo xtask bench --only insns`.
 *
 * The marker is `nopl 0x48505246(%rax,%rax,1)` (bytes 0f 1f 84 00 46 52 50 48) on x86-64 and
 * `hint #0x7e` (0xd5032fdf, an unallocated hint: a NOP) on arm64, which a workload executes
 * right before and right after its measured loop (`syscall_lat --marker`); both are matched,
 * whichever guest the plugin is loaded into (workloads/src/marker.rs).
 * A start marker opens a window on the vCPU that executed it; the next marker on that vCPU
 * closes it. Only that vCPU's instructions count, so the workload must stay on one CPU.
 * Any number of windows may follow each other in one guest boot.
 *
 * Counting is per translated block: a callback at the start of every executed block adds the
 * block's instruction count (and counts one execution of the block, keyed by its start
 * address). A block cut short by an exception is counted whole, and the blocks holding the two
 * markers are off by the few instructions around them: a handful per window.
 *
 * Debian ships no QEMU plugin header, so the few API types and functions used are declared
 * here, as QEMU 7.2's include/qemu/qemu-plugin.h defines them.
 *
 * Arguments: `out=PATH` (required): the report, one block per window:
 *   window <n> vcpu <v> insns <total> blocks <k>
 *   tb <start address, hex> <instructions executed> <executions>     (k lines)
 *   end <n>
 * and at exit `exit windows <n> open <0|1>`.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags {
    QEMU_PLUGIN_CB_NO_REGS,
    QEMU_PLUGIN_CB_R_REGS,
    QEMU_PLUGIN_CB_RW_REGS,
};
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static const unsigned char MARKER_X86_64[8] = {0x0f, 0x1f, 0x84, 0x00, 0x46, 0x52, 0x50, 0x48};
static const unsigned char MARKER_AARCH64[4] = {0xdf, 0x2f, 0x03, 0xd5};

static int is_marker(const struct qemu_plugin_insn *insn)
{
    size_t size = qemu_plugin_insn_size(insn);
    const void *data = qemu_plugin_insn_data(insn);
    return (size == sizeof(MARKER_X86_64) && memcmp(data, MARKER_X86_64, size) == 0) ||
           (size == sizeof(MARKER_AARCH64) && memcmp(data, MARKER_AARCH64, size) == 0);
}

/* One translation of a block. Blocks are retranslated at times; the report sums by address. */
struct block {
    uint64_t vaddr;
    uint64_t n_insns;
    /* Executions in the open window, by the window's vCPU only (so no other writer). */
    uint64_t hits;
    /* The window's list of blocks with hits > 0. */
    struct block *next_touched;
};

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* The open window's vCPU, or -1. Read by every vCPU in every block: relaxed atomics. */
static int window_vcpu = -1;
static uint64_t window_insns;
static struct block *touched;
static unsigned windows;

static void block_executed(unsigned int vcpu, void *userdata)
{
    if ((int)vcpu != __atomic_load_n(&window_vcpu, __ATOMIC_RELAXED)) {
        return;
    }
    struct block *block = userdata;
    if (block->hits++ == 0) {
        block->next_touched = touched;
        touched = block;
    }
    window_insns += block->n_insns;
}

static void marker_executed(unsigned int vcpu, void *userdata)
{
    (void)userdata;
    pthread_mutex_lock(&lock);
    int open = __atomic_load_n(&window_vcpu, __ATOMIC_RELAXED);
    if (open < 0) {
        window_insns = 0;
        touched = NULL;
        __atomic_store_n(&window_vcpu, (int)vcpu, __ATOMIC_RELAXED);
    } else if ((unsigned)open == vcpu) {
        __atomic_store_n(&window_vcpu, -1, __ATOMIC_RELAXED);
        windows++;
        unsigned blocks = 0;
        for (struct block *b = touched; b; b = b->next_touched) {
            blocks++;
        }
        fprintf(out, "window %u vcpu %u insns %llu blocks %u\n", windows, vcpu,
                (unsigned long long)window_insns, blocks);
        for (struct block *b = touched; b; b = b->next_touched) {
            fprintf(out, "tb %llx %llu %llu\n", (unsigned long long)b->vaddr,
                    (unsigned long long)(b->hits * b->n_insns), (unsigned long long)b->hits);
            b->hits = 0;
        }
        touched = NULL;
        fprintf(out, "end %u\n", windows);
        fflush(out);
    }
    /* A marker on another vCPU while a window is open is left out: the report's window count
     * then disagrees with the runs, which the bench reports. */
    pthread_mutex_unlock(&lock);
}

static void block_translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    struct block *block = calloc(1, sizeof(*block));
    if (!block) {
        abort();
    }
    block->vaddr = qemu_plugin_tb_vaddr(tb);
    block->n_insns = n;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, block_executed, QEMU_PLUGIN_CB_NO_REGS, block);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (is_marker(insn)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, marker_executed, QEMU_PLUGIN_CB_NO_REGS,
                                                   NULL);
        }
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    (void)id;
    (void)userdata;
    pthread_mutex_lock(&lock);
    fprintf(out, "exit windows %u open %d\n", windows,
            __atomic_load_n(&window_vcpu, __ATOMIC_RELAXED) >= 0);
    fclose(out);
    out = NULL;
    pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info, int argc,
                                                               char **argv)
{
    (void)info;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            path = argv[i] + 4;
        } else {
            fprintf(stderr, "insn_count: unknown argument %s (want out=PATH)\n", argv[i]);
            return -1;
        }
    }
    if (!path) {
        fprintf(stderr, "insn_count: missing argument out=PATH\n");
        return -1;
    }
    out = fopen(path, "w");
    if (!out) {
        perror(path);
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, block_translated);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
