/* Differential test of parameter parsing: gradient-compression thresholds (finite numbers
 * greater than 0 only: an infinite threshold would zero every later push) and the tuple
 * strings of operator parameters (`shape` of _zeros, `axis` of sum), which must be read as
 * MXNet's parser reads them: `(2,,3)` or `((2,3))` refused, not read as `(2,3)`. Only the
 * return codes and results are printed: the messages differ. The strings MXNet accepts
 * where libkvstore deliberately differs (`()`, `None`, "", a trailing space after a
 * threshold) are left out. */
#include "common.h"

static void threshold(const char *t) {
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("device", &kv));
  const char *keys[2] = {"type", "threshold"}, *vals[2] = {"2bit", t};
  int rc = MXKVStoreSetGradientCompression(kv, 2, keys, vals);
  /* a refused setting changes nothing: the push below is summed exactly */
  int key = 3;
  NDArrayHandle init = f32_filled(4, 0, 0), g = f32_filled(4, 0.3f, 0), out = f32_filled(4, -1, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  CHECK(MXKVStorePush(kv, 1, &key, &g, 0));
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  printf("threshold '%s': rc=%d, then a push of 0.3 stores %g\n", t, rc, f32_uniform(out, 4));
  CHECK(MXKVStoreFree(kv));
  CHECK(MXNDArrayFree(init));
  CHECK(MXNDArrayFree(g));
  CHECK(MXNDArrayFree(out));
}

static void show_result(const char *what, const char *text, int rc, NDArrayHandle *outs) {
  printf("%s '%s': rc=%d", what, text, rc);
  if (rc == 0) {
    int nd;
    const int *dims;
    CHECK(MXNDArrayGetShapeEx(outs[0], &nd, &dims));
    printf(" shape (");
    for (int i = 0; i < nd; i++) printf("%d,", dims[i]);
    printf(")");
    CHECK(MXNDArrayFree(outs[0]));
  }
  printf("\n");
}

static void zeros_shape(const char *shape) {
  void *creator;
  CHECK(NNGetOpHandle("_zeros", &creator));
  const char *keys[2] = {"shape", "dtype"}, *vals[2] = {shape, "float32"};
  int n = 0;
  NDArrayHandle *outs = NULL;
  const int *stypes;
  int rc = MXImperativeInvokeEx(creator, 0, NULL, &n, &outs, 2, keys, vals, &stypes);
  show_result("_zeros shape", shape, rc, outs);
}

static void sum_axis(const char *axis) {
  void *creator;
  CHECK(NNGetOpHandle("sum", &creator));
  uint32_t shape[2] = {2, 3};
  NDArrayHandle in;
  CHECK(MXNDArrayCreateEx(shape, 2, DEV_CPU, 0, 0, DT_F32, &in));
  const char *keys[1] = {"axis"}, *vals[1] = {axis};
  int n = 0;
  NDArrayHandle *outs = NULL;
  const int *stypes;
  int rc = MXImperativeInvokeEx(creator, 1, &in, &n, &outs, 1, keys, vals, &stypes);
  show_result("sum axis", axis, rc, outs);
  CHECK(MXNDArrayFree(in));
}

int main(void) {
  const char *thresholds[] = {"0.5", "inf", "Infinity", "-inf", "nan", "1e40", "1e-50", "0", "-1",
                              " 0.5", "0.5x", "", "+2", "2.", ".5", "0x10", "1e3"};
  for (size_t i = 0; i < sizeof thresholds / sizeof *thresholds; i++) threshold(thresholds[i]);
  const char *shapes[] = {"(2,3)", "(2, 3)", "[2,3]", "[2,3)", "(2,)", "(2,3,)", "( 2 , 3 )", " (2,3) ",
                          "(2L,3L)", "(+2,3)", "2", "(2,,3)", "((2,3))", "(,2)", "(2,3", "2,3",
                          "(2 3)", "(2,3)x", "(2,3),", "(2.0,3)", "(-1,2)"};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) zeros_shape(shapes[i]);
  const char *axes[] = {"(0,)", "0", "-1", "None", "()", "(0, 1)", "[0,1]", "(0,,1)", "((0,1))", "(0,1", "(,1)", "0,1"};
  for (size_t i = 0; i < sizeof axes / sizeof *axes; i++) sum_axis(axes[i]);
  CHECK(MXNDArrayWaitAll());
  printf("done\n");
  return 0;
}
