package dev.tpcomm.gpu.sim

import dev.tpcomm.gpu.NcclEnvRead
import java.util.concurrent.ConcurrentHashMap

/**
 * The lifetime rules of the simulated NCCL that depend on the version and on host threads
 * (issue 35; docs/nccl-semantics.md N3, N10a, N12a, N17a). [SimulatedNccl] calls it; it records
 * what a real library would turn into corruption or a hang as misuse. Thread-safe.
 *
 * - **N10a, the thread-local group job** (NVIDIA/nccl v2.18.3-1 to v2.26.6-1 `src/group.cc`:
 *   `__thread struct ncclGroupJob ncclGroupJobMain`, `__thread ... ncclAsyncJobs`; the
 *   non-blocking branch of `ncclGroupEndInternal` starts the job's thread over pointers into the
 *   issuing thread's thread-locals and returns `ncclInProgress` without resetting them;
 *   `groupResetJobState` runs only from `ncclGroupJobComplete`, which `ncclCommGetAsyncError`
 *   calls once the state is `ncclSuccess`, or `ncclGroupJobAbort` from `ncclCommEnsureReady`
 *   in `ncclCommAbort`). A second group end on that thread before the join launches the same
 *   queued jobs again over the same lists. v2.27.3-1 allocates the job on the heap and resets the
 *   thread-locals at every group end (`groupLocalResetJobState`). RCCL 2.21.5 keeps the
 *   thread-local design. [threadLocalGroupJob] says which the simulated library is.
 * - **N12a, an abort racing a call**: `ncclCommAbort` while another thread is inside a call on the
 *   same communicator (NVIDIA/nccl `docs/userguide/source/usage/communicators.rst`, fault
 *   tolerance: "make sure no thread is calling any NCCL operations while calling ncclCommAbort";
 *   both `ncclCommAbort` and `ncclCommGetAsyncError` complete the linked group job).
 * - **N17a, launch order across communicators of one device**: without
 *   `NCCL_LAUNCH_ORDER_IMPLICIT=1` (NVIDIA/nccl `src/enqueue.cc` `getImplicitOrder`, since 2.26;
 *   default 0, `env.rst`), a kernel of one communicator launched on a stream that is not ordered
 *   after the previous kernel of another communicator of the device can deadlock with it
 *   (`usage/communicators.rst`, "Using multiple NCCL communicators concurrently": "serializing
 *   the order of all communication operations (via CUDA stream dependencies ...)").
 */
internal class SimulatedLifetimes(private val platform: SimulatedGpuPlatform) {
    /** True for the versions that keep the group job in thread-local storage: NCCL before 2.27.3, and RCCL. */
    val threadLocalGroupJob: Boolean =
        platform.version < TLS_GROUP_JOB_FIXED || platform.libraryName.contains("RCCL", ignoreCase = true)

    /** The non-blocking group job each thread launched and nobody joined yet (N10a). */
    private val pending = ConcurrentHashMap<Thread, PendingJob>()

    private class PendingJob(val comms: Set<Any>, val what: String)

    /**
     * A call that ends a group on the calling thread ([call]; the depth returns to 0). Before
     * 2.27.3 a job launched earlier on this thread and not joined yet runs a second time.
     */
    fun groupEnds(call: String, joinsFirst: Any? = null) {
        if (!threadLocalGroupJob) return
        val me = Thread.currentThread()
        val job = pending[me] ?: return
        if (joinsFirst != null && joinsFirst in job.comms) { // ncclCommAbort's ncclCommEnsureReady joins its own job first
            pending.remove(me, job)
            return
        }
        platform.recordMisuse(
            "$call ended a group on thread '${me.name}' while the non-blocking job of ${job.what} it launched was not joined: " +
                "${platform.libraryName} ${platform.version} keeps the group job in thread-local storage (src/group.cc " +
                "ncclGroupEndInternal, __thread ncclGroupJobMain; reset only by ncclGroupJobComplete), so the queued jobs run twice",
        )
    }

    /** A non-blocking group end on the calling thread launched a job for [comms] ([what]) and returned `ncclInProgress`. */
    fun launched(comms: Collection<Any>, what: String) {
        if (threadLocalGroupJob) pending[Thread.currentThread()] = PendingJob(comms.toSet(), what)
    }

    /** `ncclCommGetAsyncError` read `ncclSuccess` on [comm], or `ncclCommAbort` aborted it: its job is joined, its thread's state reset. */
    fun joined(comm: Any) {
        if (!threadLocalGroupJob) return
        pending.entries.removeIf { comm in it.value.comms }
    }

    // ---------------------------------------------------------------- N12a

    /** Threads inside a call on a communicator (only the calls the simulator times: [SimulatedGpuPlatform.slowAsyncErrorPollMillis]). */
    private val inside = ConcurrentHashMap<Any, Thread>()
    private val aborting = ConcurrentHashMap<Any, Thread>()

    /** Runs [body], a call on [comm], recording an abort of [comm] from another thread meanwhile. */
    fun <T> call(comm: Any, name: String, rank: Int, body: () -> T): T {
        aborting[comm]?.let { t -> if (t !== Thread.currentThread()) raced(name, rank, t) }
        inside[comm] = Thread.currentThread()
        try {
            return body()
        } finally {
            inside.remove(comm, Thread.currentThread())
        }
    }

    /** `ncclCommAbort` of [comm] runs [body]: a call of another thread inside it meanwhile is misuse. */
    fun abort(comm: Any, rank: Int, body: () -> Unit) {
        inside[comm]?.let { t -> if (t !== Thread.currentThread()) raced("ncclCommAbort", rank, t) }
        aborting[comm] = Thread.currentThread()
        try {
            body()
        } finally {
            aborting.remove(comm)
        }
    }

    private fun raced(call: String, rank: Int, other: Thread) {
        platform.recordMisuse(
            "$call on rank $rank's communicator on thread '${Thread.currentThread().name}' while thread '${other.name}' is " +
                "inside another call on it (ncclCommAbort must not run while any thread calls NCCL on the communicator: usage/communicators.rst)",
        )
    }

    // ---------------------------------------------------------------- N17a

    /** True when NCCL orders launches of different communicators itself (`NCCL_LAUNCH_ORDER_IMPLICIT=1`, 2.26+). */
    val implicitLaunchOrder: Boolean
        get() = platform.version >= LAUNCH_ORDER_IMPLICIT_SINCE &&
            NcclEnvRead.integer(platform.environment["NCCL_LAUNCH_ORDER_IMPLICIT"]) == 1L

    private class LastLaunch(val comm: SimulatedNccl.SimComm, val world: Any, val stream: SimulatedRuntime.SimStream, val count: Long)

    /**
     * The last launch per device and host thread. Launches of different host threads on one device
     * are N17's (recorded there); those of different processes sharing a GPU (the simulator's ranks
     * on device 0, each with its own device thread) run in different contexts that the GPU time-slices.
     */
    private val last = ConcurrentHashMap<Pair<Int, Thread>, LastLaunch>()

    /** A kernel of a communicator of [world] launched on [stream] of [device] (called at the API call, in issue order). */
    fun launch(comm: SimulatedNccl.SimComm, world: Any, stream: SimulatedRuntime.SimStream) {
        val device = comm.device
        val rank = comm.rank
        val n = stream.ncclLaunches.incrementAndGet()
        val prev = last.put(device to Thread.currentThread(), LastLaunch(comm, world, stream, n))
        // A communicator aborted or destroyed since has no kernel left (abort makes them exit; destroy after
        // finalize waited for them): nothing to order after.
        if (prev == null || !prev.comm.live || prev.world === world || prev.stream === stream || implicitLaunchOrder) return
        if ((stream.orderedAfter[prev.stream] ?: 0L) >= prev.count) return
        platform.recordMisuse(
            "rank $rank launched on device $device on a stream not ordered after the previous kernel of another communicator " +
                "of the device (no stream dependency, NCCL_LAUNCH_ORDER_IMPLICIT unset): the two can deadlock " +
                "(usage/communicators.rst, 'Using multiple NCCL communicators concurrently'; src/enqueue.cc getImplicitOrder)",
        )
    }

    companion object {
        /** NCCL 2.27.3: the group job on the heap (`groupLocalResetJobState`). */
        const val TLS_GROUP_JOB_FIXED = 22703
        /** NCCL 2.26: `NCCL_LAUNCH_ORDER_IMPLICIT`. */
        const val LAUNCH_ORDER_IMPLICIT_SINCE = 22600
    }
}
