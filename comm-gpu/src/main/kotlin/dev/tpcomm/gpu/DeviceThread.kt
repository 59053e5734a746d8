package dev.tpcomm.gpu

import dev.tpcomm.engine.NativeDispatcher
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.coroutines.EmptyCoroutineContext

/**
 * The one native thread of a device: every communicator of this process on that device (a world's
 * communicator, its split children, and independent worlds) issues its library calls from it, so
 * that every NCCL launch for the device comes from one host thread in one order (NVIDIA/nccl
 * `docs/userguide/source/usage/communicators.rst`, "Using multiple NCCL communicators concurrently":
 * the order of host-side launches must match on every device, "most easily accomplished by using a
 * deterministic order issued from a single host thread per-device"; docs/nccl-semantics.md N17).
 *
 * It also holds what NCCL keeps **per host thread** rather than per communicator: the depth of
 * `ncclGroupStart` and the point-to-point window that is open on it (NVIDIA/nccl `src/group.cc`:
 * `thread_local int ncclGroupDepth`; N10). A call of one communicator issued while another's window
 * is open would otherwise join that group, be reported complete before any kernel ran, and return
 * wrong data.
 *
 * The stream of a communicator that closed is destroyed once nothing can still target it
 * ([retireStream]): when no output allocated on it is alive (their frees are ordered on it), after
 * its last work is done ([RetiredStreams]); the streams still holding live outputs when the thread
 * ends are destroyed with it.
 *
 * Obtained from [DeviceThreads]; released by each communicator once; the last release ends the
 * thread. [retain]/[release] are thread-safe; the group fields are touched on the native thread only.
 */
internal class DeviceThread(
    val dispatcher: NativeDispatcher,
    private val runtime: DeviceRuntime,
    private val registry: DeviceThreads,
    val key: DeviceThreads.Key,
) {
    /** Communicators using the thread; guarded by the registry's lock. */
    var refs = 1

    /** Depth of `ncclGroupStart` on this thread (native thread only). */
    var groupDepth = 0

    /**
     * Completed once the last operation the thread took (of any communicator) issued its library
     * calls: the next one issues after it, so launches keep the order of the calls even while an
     * operation waits for its call to be attached ([NcclOperationQueue]'s reserved operations). Native thread only.
     */
    var issueTail: kotlinx.coroutines.CompletableDeferred<Unit>? = null

    /** The communicator whose point-to-point window (an open group) is open on this thread, or null (native thread only). */
    var p2pOwner: P2pWindow? = null
    var p2pOpenedAt = 0L
    var p2pSends = false
    var p2pRecvs = false

    /** The device's memory budget: the outputs every communicator of the device allocates count against it. */
    val memory: DeviceMemoryBudget = DeviceMemoryBudget(runtime, key.device, this)

    /**
     * Out-cells of splits that failed or timed out (issue 35, finding 5): NCCL's job stores the
     * half-built child into `*newcomm` even when it failed (NVIDIA/nccl `src/init.cc`
     * `ncclCommInitRankFunc`: `fail:` then `exit:` stores `job->newcomm`), and "any new communicator
     * returned" must be aborted (`usage/communicators.rst`, fault tolerance). [reapOrphans] aborts
     * what they hold. Thread-safe.
     */
    private val orphans = java.util.concurrent.ConcurrentLinkedQueue<java.lang.foreign.MemorySegment>()

    /** Keeps [cell], the out-cell of a split that failed, until a child appears in it ([reapOrphans]). */
    fun adoptOrphan(cell: java.lang.foreign.MemorySegment) {
        orphans += cell
    }

    /**
     * Aborts ([api], the library itself) every half-built child that appeared in an [adoptOrphan]
     * cell. Called after each release of a communicator of this device: the parent's `ncclCommAbort`
     * raised the child's abort flag (`comm->childAbortFlag`) and joined its job.
     */
    fun reapOrphans(api: NcclApi) {
        val it = orphans.iterator()
        while (it.hasNext()) {
            val cell = it.next()
            val child = cell.get(java.lang.foreign.ValueLayout.JAVA_LONG, 0)
            if (child != 0L) {
                it.remove()
                api.commAbort(child)
            }
        }
    }

    /** Streams of closed communicators that nothing targets any more, destroyed after their last work (native thread only). */
    private val retired = RetiredStreams(runtime)

    /** The world whose operations were issued last on this device, and their streams since it became last ([orderAcross]). */
    private var lastWorld: Any? = null
    private val lastStreams = ArrayList<Long>()
    /** The event [orderAcross] records and waits on (created on first use, destroyed when the thread ends). */
    private var orderEvent = 0L

    /**
     * Orders [stream] (of a communicator of [world]) after the NCCL work already issued on this
     * device by communicators of other worlds (issue 35, finding 3; docs/nccl-semantics.md N17a):
     * `cudaEventRecord` on each of their streams and `cudaStreamWaitEvent` on [stream], no host
     * synchronisation. NCCL guarantees no deadlock between communicators of one device only when
     * their operations are serialised "via CUDA stream dependencies" or with
     * `NCCL_LAUNCH_ORDER_IMPLICIT=1` (2.26+, default off) (NVIDIA/nccl
     * `docs/userguide/source/usage/communicators.rst`, "Using multiple NCCL communicators
     * concurrently"; `src/enqueue.cc` `getImplicitOrder`). Every rank issues its worlds' calls from
     * one thread per device in program order, so the dependencies make one total order on every
     * device. Ranks of one world (several ranks on one GPU) are not ordered against each other:
     * their kernels wait for each other. Native thread only.
     */
    fun orderAcross(world: Any, stream: Long, check: (Int, String) -> Unit) {
        if (lastWorld == null || lastWorld == world) {
            lastWorld = world
            if (stream !in lastStreams) lastStreams += stream
            return
        }
        if (orderEvent == 0L) {
            val e = LongArray(1)
            check(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
            orderEvent = e[0]
        }
        for (s in lastStreams) {
            if (s == stream) continue
            check(runtime.eventRecord(orderEvent, s), "eventRecord(another world's stream)")
            check(runtime.streamWaitEvent(stream, orderEvent), "streamWaitEvent(another world's stream)")
        }
        lastWorld = world
        lastStreams.clear()
        lastStreams += stream
    }

    /** One more communicator uses the thread. */
    fun retain(): DeviceThread = registry.retain(this)

    /**
     * [stream]'s communicator closed (native thread only): its cached output blocks are freed, and the
     * stream is destroyed once no output of it is alive and its last work is done ([streamUnused]).
     * It leaves the cross-world order ([orderAcross]): a communicator's close (`ncclCommFinalize`,
     * which flushes its uncompleted operations, or `ncclCommAbort`) left no kernel of it to order after.
     */
    fun retireStream(stream: Long) {
        lastStreams.remove(stream)
        memory.retire(stream)
        retired.reap()
    }

    /** Nothing can target [stream] any more ([DeviceOutputPool]): destroyed once its last work is done (native thread only). */
    fun streamUnused(stream: Long) {
        retired.add(stream)
    }

    /** Destroys the retired streams whose last work is done (native thread only). */
    fun reapRetiredStreams() {
        retired.reap()
    }

    /**
     * Runs [task] on the native thread when it is still running, and returns true; false when it
     * ended (the task did not run). Never runs [task] on another thread.
     */
    fun runOnThread(task: Runnable): Boolean = registry.ifOpen(this) { dispatcher.dispatch(EmptyCoroutineContext, task) }

    /** A communicator is done with the thread; the last one destroys the retired streams and ends it. */
    fun release(timeoutNanos: Long) {
        if (!registry.release(this)) return
        val done = CountDownLatch(1)
        val destroy = Runnable {
            try {
                // Streams of closed communicators whose outputs are still alive: those frees now go to their consumer stream (DeviceFree).
                for (s in memory.end()) runtime.streamDestroy(s)
                retired.destroyAll()
                if (orderEvent != 0L) runtime.eventDestroy(orderEvent)
                orderEvent = 0L
            } finally {
                done.countDown()
            }
        }
        if (dispatcher.isNativeThread) destroy.run() else dispatcher.dispatch(EmptyCoroutineContext, destroy)
        done.await(timeoutNanos.coerceAtLeast(1), TimeUnit.NANOSECONDS)
        dispatcher.close()
    }

    override fun toString(): String = "DeviceThread(${dispatcher.name})"
}

/**
 * The [DeviceThread]s of a process, one per (runtime, device). [PROCESS] is the registry every
 * communicator uses; a test that simulates several processes in one JVM gives each its own. Thread-safe.
 */
internal class DeviceThreads {
    /**
     * A device of one runtime, compared by the runtime's identity: two simulated platforms never share
     * a thread, and a binding must hand every communicator of the process the same runtime instance
     * (comm-nccl's `JavaCppPlatform.runtime()` and comm-rccl's platform do).
     */
    class Key(val runtime: DeviceRuntime, val device: Int) {
        override fun equals(other: Any?): Boolean = other is Key && other.runtime === runtime && other.device == device
        override fun hashCode(): Int = System.identityHashCode(runtime) * 31 + device
    }

    private val lock = Any()
    private val threads = HashMap<Key, DeviceThread>()

    /** The running thread of [device], retained, or a new one named after [backendName] and the device. */
    fun acquire(runtime: DeviceRuntime, device: Int, backendName: String): Pair<DeviceThread, Boolean> = synchronized(lock) {
        val key = Key(runtime, device)
        threads[key]?.let { t ->
            t.refs++
            return t to false
        }
        val t = DeviceThread(NativeDispatcher("tpcomm-$backendName-device$device", idleSpinNanos = IDLE_SPIN_NANOS), runtime, this, key)
        threads[key] = t
        t to true
    }

    fun retain(t: DeviceThread): DeviceThread = synchronized(lock) {
        check(t.refs > 0) { "$t already ended" }
        t.refs++
        t
    }

    /** True when this was the last reference (the caller then ends the thread). */
    fun release(t: DeviceThread): Boolean = synchronized(lock) {
        if (t.refs <= 0) return false
        t.refs--
        if (t.refs > 0) return false
        threads.remove(t.key, t)
        true
    }

    fun ifOpen(t: DeviceThread, action: () -> Unit): Boolean = synchronized(lock) {
        if (t.refs <= 0 || t.dispatcher.isClosed) return false
        action()
        true
    }

    companion object {
        /** This process's device threads. */
        val PROCESS: DeviceThreads = DeviceThreads()

        /**
         * How long a device thread stays awake after its last task (`TPCOMM_GPU_IDLE_SPIN_US`,
         * microseconds, 0 to 10,000; default 50), spinning then yielding: a call issued meanwhile is
         * taken without waking the thread. On an H200 at a world of 1 (docs/gpu.md, "The first GPU
         * run", runs 6 and 7), with the caller's spin ([CALLER_SPIN_NANOS]), an awaited 8-byte
         * all-reduce took 5.7-7.9 µs instead of 19.5-24.9 µs with neither.
         */
        val IDLE_SPIN_NANOS: Long = dev.tpcomm.engine.SpinSetting.fromEnvironment("TPCOMM_GPU_IDLE_SPIN_US", defaultMicros = 50L)
    }
}

/**
 * A point-to-point window that can be open on a [DeviceThread] (an open NCCL group of one
 * communicator's sends and receives): whoever must issue something else on the thread ends it
 * first. Implemented by [PointToPointWindow]; native thread only.
 */
internal interface P2pWindow {
    /** Ends the window's group (and waits until the library accepted it); nothing when it is not open. */
    fun endP2pWindow()
}
