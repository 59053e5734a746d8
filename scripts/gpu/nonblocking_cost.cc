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
//   thread  std::thread(job); caller spins on the job's completion flag; join (non-blocking)
// Also reported: how long after the thread's creation the caller saw the flag (p50/p99), which is
// how long tpcomm's engine spins in waitReady before it starts sleeping.
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

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(p * (v.size() - 1) + 0.5))];
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 21;
  int ops = argc > 2 ? atoi(argv[2]) : 2000;
  std::vector<double> inl, thr, seen;
  for (int r = 0; r < rounds; r++) {
    for (int mode = 0; mode < 2; mode++) {
      int m = (r % 2 == 0) ? mode : 1 - mode;  // alternate which mode goes first
      double start = now_ns();
      for (int i = 0; i < ops; i++) {
        std::atomic<bool> done{false};
        if (m == 0) {
          job(&done);
        } else {
          double t0 = now_ns();
          std::thread t(job, &done);
          while (!done.load(std::memory_order_acquire)) { }
          if (i % 16 == 0) seen.push_back(now_ns() - t0);
          t.join();
        }
      }
      double per = (now_ns() - start) / ops / 1000.0;
      (m == 0 ? inl : thr).push_back(per);
    }
  }
  printf("rounds %d x %d ops, microseconds per op: inline median %.3f (min %.3f max %.3f); "
         "thread median %.2f (min %.2f max %.2f); added per group %.2f us\n",
         rounds, ops, pct(inl, 0.5), pct(inl, 0), pct(inl, 1), pct(thr, 0.5), pct(thr, 0), pct(thr, 1),
         pct(thr, 0.5) - pct(inl, 0.5));
  printf("completion seen after thread creation: p50 %.2f us, p99 %.2f us, max %.2f us (%zu samples)\n",
         pct(seen, 0.5) / 1000, pct(seen, 0.99) / 1000, pct(seen, 1) / 1000, seen.size());
  return 0;
}
