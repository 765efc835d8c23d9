/* repeat_layers.h — tp_repeat_layers (repeat_layers.c): a copy of a CMF file with n_layers decoder layers whose
 * tensors alias the payloads of the file's own layers l mod K. Returns 0, or 1 with the reason on stderr (a
 * benchmark / test helper, not library code). Used by bench/tp/run_tp.sh (the program) and tests/tp/test_tp.c
 * (compiled with REPEAT_LAYERS_NO_MAIN). */
#ifndef CMF_BENCH_REPEAT_LAYERS_H
#define CMF_BENCH_REPEAT_LAYERS_H
int tp_repeat_layers(const char *in, const char *out, int n_layers);
#endif
