/* A distributed store created where the MPI plugin cannot be found (KVSTORE_MPI_PLUGIN names
 * a missing file) answers -1 with a message naming the command that builds the plugin, and
 * changes nothing: no handle is written, and a local store works afterwards. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "common.h"

int main(void) {
  setenv("KVSTORE_MPI_PLUGIN", "/nonexistent/libkvstore_mpi.so", 1);
  setenv("DMLC_ROLE", "worker", 1);
  setenv("DMLC_NUM_WORKER", "1", 1);
  setenv("DMLC_NUM_SERVER", "1", 1);
  /* As if started by mpirun: the plugin is looked for only inside an MPI job. */
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);

  KVStoreHandle kv = (KVStoreHandle)0x1;
  EXPECT(MXKVStoreCreate("dist_sync", &kv) == -1);
  EXPECT(kv == (KVStoreHandle)0x1);
  const char *msg = MXGetLastError();
  printf("%s\n", msg);
  EXPECT(strstr(msg, "libkvstore_mpi.so") != NULL);
  EXPECT(strstr(msg, "cargo build --release --workspace") != NULL);
  EXPECT(strstr(msg, "KVSTORE_MPI_PLUGIN") != NULL);
  EXPECT(strstr(msg, "/nonexistent/libkvstore_mpi.so") != NULL);

  KVStoreHandle local;
  CHECK(MXKVStoreCreate("local", &local));
  CHECK(MXKVStoreFree(local));
  printf("dist_no_plugin passed\n");
  return 0;
}
