/* Runs polyonnx shared libraries as a manifest lists them, reading inputs from files and
 * writing outputs to files: what polyonnx.testing.emulated builds for another architecture
 * and runs under qemu-user, so that many libraries run in one emulated process.
 *
 * Usage: driver MANIFEST. The manifest is a sequence of jobs, each
 *
 *     LIBRARY N_INPUTS N_OUTPUTS
 *     INPUT_FILE BYTES      (N_INPUTS lines)
 *     OUTPUT_FILE BYTES     (N_OUTPUTS lines: the model's outputs, then its extents)
 *
 * (paths without spaces). For each job it prints "JOB STATUS": polyonnx_run's return value,
 * or -1000 when the library or an input could not be read, or memory ran out. Libraries stay
 * loaded: a library's thread pool keeps its workers, which run (spin in) the library's code.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 256
#define FAILED (-1000)

typedef int (*run_fn)(void *const *inputs, void *const *outputs);

static void *read_file(const char *path, size_t bytes) {
    void *data = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    FILE *f = fopen(path, "rb");
    if (!data || !f || (bytes && fread(data, bytes, 1, f) != 1)) {
        free(data);
        data = NULL;
    }
    if (f) fclose(f);
    return data;
}

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = !bytes || fwrite(data, bytes, 1, f) == 1;
    return fclose(f) == 0 && ok;
}

int main(int argc, char **argv) {
    FILE *manifest = argc > 1 ? fopen(argv[1], "r") : NULL;
    if (!manifest) {
        fprintf(stderr, "usage: %s MANIFEST\n", argv[0]);
        return 2;
    }
    static char library[4096], paths[2 * MAX_TENSORS][4096];
    static void *tensors[2 * MAX_TENSORS];
    static size_t sizes[2 * MAX_TENSORS];
    int n_in, n_out;
    for (int job = 0; fscanf(manifest, "%4095s %d %d", library, &n_in, &n_out) == 3; job++) {
        if (n_in < 0 || n_out < 0 || n_in > MAX_TENSORS || n_out > MAX_TENSORS) return 2;
        int n = n_in + n_out, status = 0;
        for (int k = 0; k < n; k++) {
            if (fscanf(manifest, "%4095s %zu", paths[k], &sizes[k]) != 2) return 2;
            tensors[k] = k < n_in ? read_file(paths[k], sizes[k])
                                  : aligned_alloc(64, sizes[k] ? (sizes[k] + 63) / 64 * 64 : 64);
            if (!tensors[k]) status = FAILED;
        }
        void *lib = status ? NULL : dlopen(library, RTLD_NOW | RTLD_LOCAL);
        run_fn run = lib ? (run_fn)dlsym(lib, "polyonnx_run") : NULL;
        if (!run) {
            if (!status) fprintf(stderr, "job %d: %s\n", job, dlerror());
            status = FAILED;
        } else {
            status = run(tensors, tensors + n_in);
        }
        for (int k = n_in; k < n && status == 0; k++)
            if (!write_file(paths[k], tensors[k], sizes[k])) status = FAILED;
        for (int k = 0; k < n; k++) free(tensors[k]);
        printf("%d %d\n", job, status);
        fflush(stdout);
    }
    fclose(manifest);
    return 0;
}
