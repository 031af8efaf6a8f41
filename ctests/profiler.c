/* MXNet's profiler C API on libkvstore.so: configuration, run/pause/stop, the Chrome trace
 * dump, the aggregate table, the domain/task/frame/event/counter/marker objects, and bad input
 * (each answers -1 with a message and changes nothing). The dumped file is checked for the
 * events of the objects and of a push and pull. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include <unistd.h>

/* The call must fail with a message containing `part`. */
#define FAILS(call, part)                                                              \
  do {                                                                                 \
    if ((call) != -1 || !strstr(MXGetLastError(), (part))) {                           \
      fprintf(stderr, "%s:%d: %s should fail with \"%s\", got: %s\n", __FILE__,        \
              __LINE__, #call, (part), MXGetLastError());                              \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  EXPECT(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  EXPECT(fread(text, 1, (size_t)n, f) == (size_t)n);
  text[n] = 0;
  fclose(f);
  return text;
}

#define CONTAINS(text, part)                                                           \
  do {                                                                                 \
    if (!strstr((text), (part))) {                                                     \
      fprintf(stderr, "%s:%d: missing %s in:\n%s\n", __FILE__, __LINE__, (part), (text)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

int main(void) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/kvstore-ctest-profile-%d.json", (int)getpid());
  const char *stats = NULL;

  /* Nothing to dump before the profiler has run; bad configurations change nothing. */
  FAILS(MXDumpProfile(1), "has not been run");
  const char *bad_keys[] = {"filename", "profile_everything"};
  const char *bad_vals[] = {path, "1"};
  FAILS(MXSetProfilerConfig(2, bad_keys, bad_vals), "unknown profiler config key 'profile_everything'");
  const char *bad_bool[] = {"maybe"};
  const char *all_key[] = {"profile_all"};
  FAILS(MXSetProfilerConfig(1, all_key, bad_bool), "invalid value 'maybe' for profile_all");
  FAILS(MXSetProfilerConfig(1, NULL, bad_bool), "keys is NULL");
  FAILS(MXSetProfilerConfig(-1, all_key, bad_bool), "negative");
  FAILS(MXSetProfilerState(2), "not 0 (stop) or 1 (run)");
  FAILS(MXSetProcessProfilerState(1, 1, NULL), "server");
  FAILS(MXProcessProfilePause(1, 7, NULL), "profile_process 7");
  FAILS(MXAggregateProfileStatsPrintEx(NULL, 0, 0, 0, 0), "out_str is NULL");
  FAILS(MXAggregateProfileStatsPrintEx(&stats, 0, 2, 0, 0), "format 2");
  FAILS(MXAggregateProfileStatsPrintEx(&stats, 0, 0, 9, 0), "sort_by 9");

  const char *keys[] = {"filename", "profile_all", "aggregate_stats"};
  const char *vals[] = {path, "True", "1"};
  CHECK(MXSetProfilerConfig(3, keys, vals));
  CHECK(MXSetProfilerState(1));

  ProfileHandle domain, task, frame, event, counter;
  CHECK(MXProfileCreateDomain("mydomain", &domain));
  CHECK(MXProfileCreateTask(domain, "mytask", &task));
  CHECK(MXProfileCreateFrame(domain, "myframe", &frame));
  CHECK(MXProfileCreateEvent("myevent", &event));
  CHECK(MXProfileCreateCounter(domain, "mycounter", &counter));
  FAILS(MXProfileCreateDomain(NULL, &domain), "domain is NULL");
  FAILS(MXProfileCreateTask(counter, "t", &task), "not a profiling domain");
  FAILS(MXProfileCreateTask(domain, NULL, &task), "task_name is NULL");
  FAILS(MXProfileCreateCounter(domain, "c", NULL), "out is NULL");

  CHECK(MXProfileDurationStart(task));
  CHECK(MXProfileDurationStart(frame));
  CHECK(MXProfileSetCounter(counter, 10));
  CHECK(MXProfileAdjustCounter(counter, -3));
  FAILS(MXProfileAdjustCounter(counter, -8), "counter 'mycounter' is 7");
  FAILS(MXProfileSetCounter(task, 1), "not a counter");
  FAILS(MXProfileSetCounter(NULL, 1), "counter_handle is NULL");
  CHECK(MXProfileSetMarker(domain, "mymarker", "thread"));
  FAILS(MXProfileSetMarker(domain, "m", "galaxy"), "invalid marker scope 'galaxy'");
  FAILS(MXProfileDurationStop(event), "'myevent' was not started");
  FAILS(MXProfileDurationStart(counter), "not a task, frame or event");

  /* The store's own work, inside the frame. */
  KVStoreHandle kv;
  CHECK(MXKVStoreCreate("local", &kv));
  int key = 5;
  NDArrayHandle init = f32_filled(1024, 1, 0), vals2[2] = {f32_filled(1024, 2, 0), f32_filled(1024, 3, 1)};
  NDArrayHandle out = f32_filled(1024, 0, 0);
  CHECK(MXKVStoreInit(kv, 1, &key, &init));
  int keys2[2] = {5, 5};
  CHECK(MXKVStorePush(kv, 2, keys2, vals2, 0));
  CHECK(MXKVStorePull(kv, 1, &key, &out, 0));
  CHECK(MXNDArrayWaitAll());
  EXPECT(f32_uniform(out, 1024) == 5);

  /* Paused: this push is not recorded. */
  CHECK(MXProfilePause(1));
  int key6 = 6;
  FAILS(MXKVStorePush(kv, 1, &key6, &init, 0), "has not been inited");
  CHECK(MXKVStoreInit(kv, 1, &key6, &init));
  CHECK(MXProfilePause(0));

  CHECK(MXProfileDurationStart(event));
  CHECK(MXProfileDurationStop(event));
  CHECK(MXProfileDurationStop(frame));
  CHECK(MXProfileDurationStop(task));

  CHECK(MXAggregateProfileStatsPrintEx(&stats, 0, 0, 4, 0));
  CONTAINS(stats, "Profile Statistics:");
  CONTAINS(stats, "kvstore\n=================\nName ");
  CONTAINS(stats, "\npush                                    1 ");
  CONTAINS(stats, "\nmytask                                  1 ");
  CHECK(MXSetProfilerState(0));
  CHECK(MXDumpProfile(1));
  FAILS(MXDumpProfile(1), "has not been run");

  char *trace = read_file(path);
  CONTAINS(trace, "{\n    \"traceEvents\": [\n");
  CONTAINS(trace, "\"displayTimeUnit\": \"ms\"\n}");
  CONTAINS(trace, "{\"name\": \"process_name\", \"ph\": \"M\"");
  CONTAINS(trace, "{\"name\": \"push\", \"cat\": \"kvstore\", \"ph\": \"B\"");
  CONTAINS(trace, "\"args\": {\"key\": 5, \"arrays\": 2, \"bytes\": 8192, \"context\": \"cpu(0)\"}");
  CONTAINS(trace, "{\"name\": \"pull\", \"cat\": \"kvstore\", \"ph\": \"E\"");
  CONTAINS(trace, "{\"name\": \"sum\", \"cat\": \"engine\", \"ph\": \"B\"");
  CONTAINS(trace, "{\"name\": \"mytask\", \"cat\": \"mydomain\", \"ph\": \"b\"");
  CONTAINS(trace, "{\"name\": \"mytask\", \"cat\": \"mydomain\", \"ph\": \"e\"");
  CONTAINS(trace, "{\"name\": \"myframe\", \"cat\": \"mydomain,frame\", \"ph\": \"B\"");
  CONTAINS(trace, "{\"name\": \"myevent\", \"cat\": \"event\", \"ph\": \"E\"");
  CONTAINS(trace, "\"ph\": \"C\"");
  CONTAINS(trace, "\"args\": {\"mycounter\": 10}");
  CONTAINS(trace, "\"args\": {\"mycounter\": 7}");
  EXPECT(strstr(trace, "\"args\": {\"mycounter\": 18446744073709551615}") == NULL);
  CONTAINS(trace, "{\"name\": \"mymarker\", \"cat\": \"mydomain,instant_marker\", \"ph\": \"i\"");
  CONTAINS(trace, "\"s\": \"t\"");
  EXPECT(strstr(trace, "\"key\": 6") == NULL); /* the paused calls */
  free(trace);
  remove(path);

  CHECK(MXProfileDestroyHandle(task));
  FAILS(MXProfileDurationStart(task), "already freed");
  FAILS(MXProfileDestroyHandle(task), "already freed");
  FAILS(MXProfileDestroyHandle(kv), "is a KVStoreHandle, not a ProfileHandle");
  FAILS(MXKVStorePush(frame, 1, &key, &init, 0), "is a ProfileHandle, not a KVStoreHandle");
  CHECK(MXProfileDestroyHandle(frame));
  CHECK(MXProfileDestroyHandle(event));
  CHECK(MXProfileDestroyHandle(counter));
  CHECK(MXProfileDestroyHandle(domain));
  CHECK(MXNDArrayFree(init));
  CHECK(MXNDArrayFree(vals2[0]));
  CHECK(MXNDArrayFree(vals2[1]));
  CHECK(MXNDArrayFree(out));
  CHECK(MXKVStoreFree(kv));
  printf("profiler: all checks passed\n");
  return 0;
}
