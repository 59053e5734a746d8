// What a non-blocking NCCL communicator adds to every ncclGroupEnd (an implicit one per collective)
// on the host, measured without a GPU: NVIDIA/nccl src/group.cc:825-857 (v2.30.7) starts a
// std::thread for each non-blocking group (STDTHREADCREATE_GOTO, src/include/checks.h:237-247),
// the job launches the group on that thread, the caller polls ncclCommGetAsyncError until the
// group leaves ncclInProgress, and that poll joins the thread (src/init.cc:3476-3479 ->
// ncclGroupJobComplete, src/group.cc:889-894). A blocking communicator launches inline
// (src/group.cc:858-864). One rank alone never gets here: its collectives append no task
// (src/enqueue.cc:3039-3041), so the single-rank branch frees the job without a thread.
//
// Modes, alternated round by round (the job stands in for groupLaunch with a trivial body):
//   inline  the job called on the caller's thread (blocking communicator)
//   spin    std::thread(job); the caller spins on the job's completion flag (a pause per poll); join
//   yield   the same, the caller yielding its core between polls (sched_yield)
//   sleep   the same, the caller spinning 1000 polls, then sleeping 100 us between polls (what
//           tpcomm's engine did in waitReady before this measurement)
//   backoff the same, the caller spinning 100 polls, yielding up to 4096, then sleeping 1 us
//           doubling to 100 us (tpcomm's Backoff.forLibraryThread, what the engine does now)
// Also reported per mode: how long after the thread's creation the caller saw the flag (p50/p99).
//
//   g++ -O2 -pthread -o nonblocking_cost nonblocking_cost.cc && ./nonblocking_cost [rounds] [ops]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

static std::atomic<long> work{0};
static void job(std::atomic<bool>* done) {
  work.fetch_add(1, std::memory_order_relaxed);
  done->store(true, std::memory_order_release);
}

static double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static inline void pause_once() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(p * (v.size() - 1) + 0.5))];
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  int ops = argc > 2 ? atoi(argv[2]) : 1000;
  const char* names[] = {"inline", "spin", "yield", "sleep", "backoff"};
  const int modes = 5;
  std::vector<double> per[modes], seen[modes];
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < modes; k++) {
      int m = (k + r) % modes;  // rotate which mode goes first
      double start = now_ns();
      for (int i = 0; i < ops; i++) {
        std::atomic<bool> done{false};
        if (m == 0) {
          job(&done);
          continue;
        }
        double t0 = now_ns();
        std::thread t(job, &done);
        int polls = 0;
        while (!done.load(std::memory_order_acquire)) {
          if (m == 1) pause_once();
          else if (m == 2) std::this_thread::yield();
          else if (m == 3) {
            if (++polls < 1000) pause_once();
            else std::this_thread::sleep_for(std::chrono::microseconds(100));
          } else {
            ++polls;
            if (polls <= 100) pause_once();
            else if (polls <= 100 + 4096) std::this_thread::yield();
            else std::this_thread::sleep_for(std::chrono::nanoseconds(std::min(100000L, 1000L << std::min(polls - 4197, 30))));
          }
        }
        if (i % 8 == 0) seen[m].push_back((now_ns() - t0) / 1000.0);
        t.join();
      }
      per[m].push_back((now_ns() - start) / ops / 1000.0);
    }
  }
  printf("%d rounds x %d ops, %u hardware threads; microseconds per op, median (min-max) of the rounds; "
         "completion seen after the thread's creation, p50 / p99\n", rounds, ops, std::thread::hardware_concurrency());
  for (int m = 0; m < modes; m++) {
    printf("  %-7s %8.3f (%.3f-%.3f)", names[m], pct(per[m], 0.5), pct(per[m], 0), pct(per[m], 1));
    if (m > 0) printf("   seen p50 %.2f p99 %.2f", pct(seen[m], 0.5), pct(seen[m], 0.99));
    printf("\n");
  }
  return 0;
}
