@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu.sim

import dev.tpcomm.DType
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclDataType
import dev.tpcomm.gpu.NcclRedOp
import dev.tpcomm.gpu.NcclResult
import dev.tpcomm.gpu.NcclVersion
import dev.tpcomm.gpu.sim.SimulatedRuntime.SimStream
import dev.tpcomm.testkit.ReferenceReduction
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.security.SecureRandom
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * The NCCL part of the simulated platform ([NcclApi]). Its specification is docs/nccl-semantics.md
 * (rows N1-N18, NVIDIA/nccl v2.30.7-1, with file and function for each behaviour);
 * `SimulatedPlatformSpecTest` checks each row. In short:
 *
 * - **Non-blocking communicators** (`blocking = 0`, unless `NCCL_COMM_BLOCKING` overrides it: N6,
 *   `src/init.cc` `envConfigOverride`): `ncclCommInitRankConfig` writes the handle at once and
 *   returns `ncclInProgress`; the communicator turns `ncclSuccess` when every rank joined, or fails
 *   with `ncclInvalidUsage` when two ranks share a device without `NCCL_MULTI_RANK_GPU_ENABLE=1`
 *   (N3, N5, `initTransportsRank`). Collectives and `ncclGroupEnd` return `ncclInProgress` and are
 *   launched by a background thread (N7, N10, `src/group.cc` `ncclGroupEndInternal`); a call on a
 *   communicator that is not ready is `ncclInvalidArgument` (`ncclCommEnsureReady`).
 * - **`ncclCommSplit`** returns `ncclSuccess` from a non-blocking split while the child is still
 *   being built (the trailing `NCCLCHECK(ncclGroupEndInternal())` lets `ncclInProgress` pass,
 *   `src/include/checks.h`); `*newcomm` stays NULL until the job stores the child
 *   (`ncclCommInitChildComm`, `ncclCommInitRankFunc`), and the parent reports `ncclInProgress` until
 *   then (N4).
 * - **A world of one** launches at the call, even inside a group: a copy when out of place, nothing
 *   in place, and returns `ncclSuccess` (N8, `src/enqueue.cc` `taskAppend`, `ncclLaunchOneRank`).
 * - **Point-to-point** (N9): the first send or receive between two ranks connects inside the group
 *   job and waits until the peer posted the other side; once connected, a send up to
 *   [SimulatedGpuPlatform.p2pBufferBytes] completes into the peer's buffer, a larger one only while
 *   the matching receive progresses.
 * - **Teardown** (N11-N13): `ncclCommFinalize` puts the communicator in progress until its work is
 *   flushed; `ncclCommDestroy` without it, `ncclCommAbort` inside an open group, and any use of a
 *   handle after `ncclCommAbort`/`ncclCommDestroy` freed it are recorded as misuse.
 * - **One launch order per device** (N17): launches for two communicators of one device from two
 *   live host threads are recorded as misuse (with `NCCL_MULTI_RANK_GPU_ENABLE`, where ranks of one
 *   world share a device, only a communicator and its split relatives).
 * - **Version- and thread-dependent lifetimes** ([SimulatedLifetimes], issue 35): the thread-local
 *   group job before NCCL 2.27.3 and in RCCL (N10a), an init inside an open group that builds
 *   nothing until the group's end (N3), `ncclCommAbort` racing a call of another thread (N12a), and
 *   launch order across the communicators of a device (N17a); a split that never completed stores
 *   its half-built child at the abort of its parent (N4).
 *
 * - **PreMulSum operators** (NVIDIA/nccl `src/enqueue.cc` `ncclRedOpCreatePreMulSum`,
 *   `ncclRedOpDestroy`, `hostToDevRedOp`): `ncclRedOpCreatePreMulSum` makes an operator of one
 *   communicator and one datatype from this rank's scalar (read at the call:
 *   `ncclScalarHostImmediate`; the device residence is not simulated and is refused), without
 *   communicating, so ranks may pass different scalars; a collective resolves it when enqueued
 *   (a datatype other than the operator's is `ncclInvalidArgument`), so it may be destroyed right
 *   after the call returned. `ncclRedOpDestroy` of a built-in or unknown operator is
 *   `ncclInvalidArgument`; using or destroying one that is not live is also recorded as misuse.
 *   [liveRedOps] counts the operators of live communicators, so a test can show none leak;
 *   `ncclCommAbort`/`ncclCommDestroy` free a communicator's operators with it (`commFree`).
 *
 * Collectives meet their peers by sequence number and read every input before any output is
 * written; reductions use comm-testkit's [ReferenceReduction], the one reference of the project.
 */
internal class SimulatedNccl(private val platform: SimulatedGpuPlatform) : NcclApi {
    private val memory get() = platform.memory
    private val runtime get() = platform.simRuntime
    private val cliques = ConcurrentHashMap<String, Clique>()
    private val groupOps = ThreadLocal.withInitial { ArrayList<PendingKernel>() }
    private val groupDepth = ThreadLocal.withInitial { 0 }
    /** Inits issued inside an open group: they join their world only at the group's end (N3). */
    private val deferredInits = ThreadLocal.withInitial { ArrayList<() -> Unit>() }
    /** The version- and thread-dependent lifetime rules (N10a, N12a, N17a). */
    internal val lifetimes = SimulatedLifetimes(platform)
    /** What the collectives compute. */
    private val results = SimulatedCollectiveResults(platform.memory)
    private val familyCounter = AtomicInteger()

    inner class Clique(val size: Int) {
        val members = arrayOfNulls<SimComm>(size)
        /** Point-to-point connections: `src * size + dst` once both sides were posted (N9). */
        val connected: MutableSet<Int> = ConcurrentHashMap.newKeySet()
        /** Sides posted for a connection not established yet: `(src * size + dst) * 2 + (0 send, 1 receive)`. */
        val connectSides: MutableSet<Int> = ConcurrentHashMap.newKeySet()
        val joined = AtomicInteger()
        val rounds = ConcurrentHashMap<Long, Round>()
        val splits = ConcurrentHashMap<Long, SplitRound>()
        val channels = ConcurrentHashMap<Long, LinkedBlockingQueue<Message>>()
        @Volatile var broken = 0

        fun channel(src: Int, dst: Int) = channels.computeIfAbsent(src.toLong() * 1_000_003 + dst) { LinkedBlockingQueue() }
    }

    inner class SimComm(val device: Int, val blocking: Boolean, val family: Int) {
        @Volatile lateinit var clique: Clique
        @Volatile var rank = 0
        val state = AtomicInteger(NcclResult.IN_PROGRESS)
        @Volatile var aborted = false
        @Volatile var finalized = false
        @Volatile var lastError: String? = null
        @Volatile var launcher: Thread? = null
        /** False while an init issued inside an open group waits for the group's end: the communicator is not built (N3). */
        @Volatile var built = true
        /** Kernels enqueued on a stream and not finished yet. */
        val inFlight = AtomicInteger()
        var collectives = 0L
        var splitCount = 0L
        val live: Boolean get() = !aborted
        /** Live PreMulSum operators by handle (from [NcclRedOp.NUM_OPS]; NCCL also scrambles them per communicator). */
        val userOps = ConcurrentHashMap<Int, UserOp>()
        var nextUserOp = 0
    }

    /** An operator of `ncclRedOpCreatePreMulSum`: its datatype and the scalar read at creation. */
    class UserOp(val datatype: Int, val factor: Double)

    /** PreMulSum operators of live communicators (created and not destroyed yet). */
    val liveRedOps: Int get() = liveComms.sumOf { it.userOps.size }

    class Message(val bytes: ByteArray, val consumed: CountDownLatch = CountDownLatch(1))

    class SplitRound(size: Int) {
        val colors = IntArray(size)
        val keys = IntArray(size)
        val children = arrayOfNulls<Any>(size)
        val cells = arrayOfNulls<MemorySegment>(size)
        val arrived = AtomicInteger()
    }

    /**
     * A kernel: [post] runs first for every kernel of a group (sends offer their data), then the
     * bodies, those that only wait for a peer to take their data ([waitsLast], sends) after the others.
     */
    class PendingKernel(
        val comm: SimComm,
        val stream: SimStream,
        val post: () -> Unit,
        val waitsLast: Boolean = false,
        /** A point-to-point kernel's connection: `(src, dst, side)` with side 0 for the send, 1 for the receive. */
        val connection: Triple<Int, Int, Int>? = null,
        val body: () -> Unit,
    )

    private class Abandon : RuntimeException(null, null, false, false)

    val liveComms: List<SimComm> get() = platform.handles.values.filterIsInstance<SimComm>()

    // ------------------------------------------------------------------ kernels

    private fun awaitPeers(latch: CountDownLatch, comm: SimComm) {
        while (!latch.await(1, TimeUnit.MILLISECONDS)) {
            if (latch.count == 0L) return
            checkAlive(comm)
        }
    }

    private fun checkAlive(comm: SimComm) {
        if (comm.aborted) throw Abandon()
        val broken = comm.clique.broken
        if (broken != 0) {
            comm.state.compareAndSet(NcclResult.SUCCESS, broken)
            comm.lastError = "a peer aborted its communicator"
            throw Abandon()
        }
    }

    private fun runKernel(comm: SimComm, body: () -> Unit) {
        try {
            while (comm.device in platform.stalled) {
                checkAlive(comm)
                Thread.sleep(1)
            }
            checkAlive(comm)
            body()
        } catch (_: Abandon) {
        } catch (f: SimFault) {
            comm.state.compareAndSet(NcclResult.SUCCESS, f.nccl)
            comm.lastError = f.message
        }
    }

    private fun noteLaunch(comm: SimComm, stream: SimStream?) {
        if (stream != null) lifetimes.launch(comm, comm.clique, stream)
        val me = Thread.currentThread()
        comm.launcher = me
        val other = liveComms.firstOrNull {
            it !== comm && it.device == comm.device && it.live && (it.family == comm.family || !platform.multiRankGpu) &&
                it.launcher.let { t -> t != null && t !== me && t.isAlive }
        }
        if (other != null) {
            platform.recordMisuse(
                "two host threads launch on device ${comm.device} for two of its communicators " +
                    "('${other.launcher?.name}' and '${me.name}'): NCCL needs one launch order per device " +
                    "(docs/userguide/source/usage/communicators.rst, 'Using multiple NCCL communicators concurrently')",
            )
        }
    }

    /** Launches [kernels] (one group's, or a single call's): fused per stream, posts first. */
    private fun launch(kernels: List<PendingKernel>) {
        for ((stream, ks) in kernels.groupBy { it.stream }) {
            ks.forEach { it.comm.inFlight.incrementAndGet() }
            stream.enqueue {
                try {
                    ks.forEach { k -> runKernel(k.comm) { k.post() } }
                    ks.filter { !it.waitsLast }.forEach { k -> runKernel(k.comm) { k.body() } }
                    ks.filter { it.waitsLast }.forEach { k -> runKernel(k.comm) { k.body() } }
                } finally {
                    ks.forEach { it.comm.inFlight.decrementAndGet() }
                }
            }
        }
    }

    /** Issues [k] now, or keeps it for the open group. Returns what the call returns. */
    private fun issue(k: PendingKernel): Int {
        noteLaunch(k.comm, k.stream)
        if (groupDepth.get() > 0) {
            groupOps.get() += k
            return NcclResult.SUCCESS
        }
        lifetimes.groupEnds("a collective or point-to-point call on rank ${k.comm.rank}")
        return launchMaybeAsync(listOf(k))
    }

    /**
     * Blocking communicators connect and launch on the calling thread; non-blocking ones return
     * ncclInProgress and connect and launch on a background thread (`src/group.cc`
     * `ncclGroupEndInternal`: `ncclCommSetAsyncError(comm, ncclInProgress)`, a `std::thread` per group).
     */
    private fun launchMaybeAsync(kernels: List<PendingKernel>): Int {
        val comms = kernels.map { it.comm }.distinct()
        if (comms.all { it.blocking }) {
            if (!connect(kernels)) return comms.first().state.get().takeIf { it != NcclResult.SUCCESS } ?: NcclResult.REMOTE_ERROR
            launch(kernels)
            return NcclResult.SUCCESS
        }
        comms.forEach { it.state.compareAndSet(NcclResult.SUCCESS, NcclResult.IN_PROGRESS) }
        lifetimes.launched(comms, "a group of rank ${comms.first().rank}'s calls")
        Thread.ofPlatform().daemon(true).name("sim-nccl-group").start {
            Thread.sleep(0, 200_000)
            if (connect(kernels)) {
                launch(kernels)
                comms.forEach { it.state.compareAndSet(NcclResult.IN_PROGRESS, NcclResult.SUCCESS) }
            }
        }
        return NcclResult.IN_PROGRESS
    }

    /**
     * N9: the group job connects every point-to-point pair it has not connected yet, and each
     * connection needs the peer to have posted the opposite side (NCCL exchanges the connection
     * details with the peer inside the job). False when the communicator was aborted or a peer failed meanwhile.
     */
    private fun connect(kernels: List<PendingKernel>): Boolean {
        // Every side first, then the waits (ncclTransportP2pSetup sends its connection details to all
        // peers of the round before it receives theirs), so a group holding both directions of an
        // exchange never waits for itself.
        val pending = ArrayList<Pair<PendingKernel, Int>>()
        for (k in kernels) {
            val (src, dst, side) = k.connection ?: continue
            val clique = k.comm.clique
            val pair = src * clique.size + dst
            if (pair in clique.connected) continue
            clique.connectSides += pair * 2 + side
            pending += k to (pair * 2 + side)
        }
        for ((k, mine) in pending) {
            val clique = k.comm.clique
            val pair = mine / 2
            val other = pair * 2 + (1 - mine % 2)
            while (pair !in clique.connected) {
                if (other in clique.connectSides) {
                    clique.connected += pair
                    break
                }
                try {
                    checkAlive(k.comm)
                } catch (_: Abandon) {
                    return false
                }
                Thread.sleep(1)
            }
        }
        return true
    }

    private fun collectiveKernel(comm: SimComm, stream: SimStream, c: Contribution): PendingKernel {
        val seq = comm.collectives++
        return PendingKernel(comm, stream, post = {}) {
            val clique = comm.clique
            val round = clique.rounds.computeIfAbsent(seq) { Round(clique.size) }
            round.inputs[comm.rank] = c
            round.arrived.countDown()
            awaitPeers(round.arrived, comm)
            val write = try {
                results.compute(round, comm.rank, clique.size)
            } catch (f: SimFault) {
                round.computed.countDown()
                throw f
            }
            round.computed.countDown()
            awaitPeers(round.computed, comm)
            write()
            if (round.finished.incrementAndGet() == clique.size) clique.rounds.remove(seq)
        }
    }

    // ------------------------------------------------------------------ the API

    override val libraryName: String get() = platform.libraryName

    override val float8IsOcp: Boolean get() = platform.float8IsOcp

    /**
     * `ncclInvalidArgument` for a datatype the simulated version lacks: `ArgsCheck` (NVIDIA/nccl
     * `src/misc/argcheck.cc`) refuses `datatype >= ncclNumTypes`, which is 10 before 2.24 (no FP8).
     */
    private fun knownType(code: Int): Boolean =
        NcclDataType.toDType(code)?.let { platform.version >= NcclDataType.minimumVersion(it) } == true

    override fun getVersion(version: IntArray): Int { version[0] = platform.version; return NcclResult.SUCCESS }

    override fun getUniqueId(uniqueId: ByteArray): Int {
        if (uniqueId.size != NcclConnector.UNIQUE_ID_BYTES) return NcclResult.INVALID_ARGUMENT
        RANDOM.nextBytes(uniqueId)
        return NcclResult.SUCCESS
    }

    override fun commInitRankConfig(comm: MemorySegment, nranks: Int, uniqueId: ByteArray, rank: Int, config: NcclCommConfig): Int {
        if (nranks < 1 || rank !in 0 until nranks || uniqueId.size != NcclConnector.UNIQUE_ID_BYTES) return NcclResult.INVALID_ARGUMENT
        val blocking = platform.blockingOverride(config.blocking)
        val c = SimComm(runtime.currentDevice("ncclCommInitRankConfig"), blocking, familyCounter.incrementAndGet())
        if (groupDepth.get() > 0) {
            // N3 inside an open group: ncclAsyncLaunch only queues the job in the thread's ncclAsyncJobs;
            // *newcomm is written, the call returns the fresh communicator's asyncResult (0, ncclSuccess)
            // with nothing built; the job runs at the user's ncclGroupEnd (src/init.cc ncclCommInitRankDev,
            // src/group.cc ncclAsyncLaunch, ncclGroupEndInternal).
            c.built = false
            c.state.set(NcclResult.SUCCESS)
            comm.set(ValueLayout.JAVA_LONG, 0, platform.handle(c))
            deferredInits.get() += {
                c.built = true
                c.state.set(NcclResult.IN_PROGRESS)
                joinInit(c, comm, nranks, uniqueId, rank)
            }
            return NcclResult.SUCCESS
        }
        lifetimes.groupEnds("ncclCommInitRankConfig")
        val code = joinInit(c, comm, nranks, uniqueId, rank)
        if (code == NcclResult.IN_PROGRESS) lifetimes.launched(listOf(c), "rank $rank's ncclCommInitRankConfig")
        return code
    }

    /** The init job of [c] (rank [rank] of [nranks]): joins its world; ncclInProgress while non-blocking. */
    private fun joinInit(c: SimComm, comm: MemorySegment, nranks: Int, uniqueId: ByteArray, rank: Int): Int {
        val key = uniqueId.joinToString("") { "%02x".format(it) }
        val clique = cliques.computeIfAbsent(key) { Clique(nranks) }
        val blocking = c.blocking
        synchronized(clique) {
            if (clique.size != nranks) return NcclResult.INVALID_ARGUMENT
            if (clique.members[rank] != null) return NcclResult.INVALID_USAGE
            c.clique = clique
            c.rank = rank
            clique.members[rank] = c
        }
        // ncclCommInitRankDev: initState = ncclInProgress, *newcomm = comm, before the async job runs.
        if (c.built && platform.handles.values.none { it === c }) comm.set(ValueLayout.JAVA_LONG, 0, platform.handle(c))
        if (clique.joined.incrementAndGet() == nranks) {
            cliques.remove(key)
            // The init job (ncclCommInitRankFunc, initTransportsRank) finishes on its own thread; every rank
            // sees every rank's device there and fails on a shared one without NCCL_MULTI_RANK_GPU_ENABLE=1 (N5).
            Thread.ofPlatform().daemon(true).name("sim-nccl-init").start {
                val devices = clique.members.map { it!!.device }
                val shared = devices.size != devices.toSet().size && !platform.multiRankGpu
                clique.members.forEach {
                    if (shared) it!!.lastError = "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."
                    it!!.state.compareAndSet(NcclResult.IN_PROGRESS, if (shared) NcclResult.INVALID_USAGE else NcclResult.SUCCESS)
                }
            }
        }
        if (!blocking) return NcclResult.IN_PROGRESS
        while (c.state.get() == NcclResult.IN_PROGRESS) Thread.sleep(1)
        return c.state.get()
    }

    override fun commSplit(comm: Long, color: Int, key: Int, newComm: MemorySegment, config: NcclCommConfig?): Int {
        val parent = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        if (parent.state.get() == NcclResult.IN_PROGRESS) return NcclResult.INVALID_ARGUMENT // init.cc:422-436
        if (parent.state.get() != NcclResult.SUCCESS) return parent.state.get()
        if (parent.inFlight.get() > 0) {
            platform.recordMisuse("ncclCommSplit on rank ${parent.rank} while ${parent.inFlight.get()} operation(s) are in flight on the parent")
        }
        newComm.set(ValueLayout.JAVA_LONG, 0, 0L) // init.cc:3098-3099: NULL until the split is complete
        lifetimes.groupEnds("ncclCommSplit on rank ${parent.rank}")
        val clique = parent.clique
        val round = clique.splits.computeIfAbsent(parent.splitCount++) { SplitRound(clique.size) }
        // copyCommConfig / parseCommConfig, then envConfigOverride (N6).
        val blocking = platform.blockingOverride(config?.blocking ?: parent.blocking)
        val child = if (color == NcclVersion.SPLIT_NOCOLOR) null else SimComm(parent.device, blocking, parent.family)
        round.colors[parent.rank] = color
        round.keys[parent.rank] = key
        round.children[parent.rank] = child
        round.cells[parent.rank] = newComm
        parent.state.set(NcclResult.IN_PROGRESS)
        if (round.arrived.incrementAndGet() == clique.size) {
            clique.splits.entries.removeIf { it.value === round }
            Thread.ofPlatform().daemon(true).name("sim-nccl-split").start {
                Thread.sleep(1)
                val groups = (0 until clique.size).filter { round.colors[it] != NcclVersion.SPLIT_NOCOLOR }.groupBy { round.colors[it] }
                for ((_, ranks) in groups) {
                    val ordered = ranks.sortedWith(compareBy({ round.keys[it] }, { it }))
                    val sub = Clique(ordered.size)
                    ordered.forEachIndexed { i, r ->
                        val ch = round.children[r] as SimComm
                        ch.clique = sub
                        ch.rank = i
                        sub.members[i] = ch
                    }
                    sub.joined.set(ordered.size)
                    sub.members.forEach { it!!.state.set(NcclResult.SUCCESS) }
                }
                // init.cc:1959-1961: the job stores the child into the caller's out-pointer, then the parent is ready.
                for (r in 0 until clique.size) {
                    val ch = round.children[r] as SimComm?
                    if (ch != null) {
                        val h = platform.handle(ch)
                        try {
                            round.cells[r]!!.set(ValueLayout.JAVA_LONG, 0, h)
                        } catch (e: RuntimeException) { // closed (IllegalStateException) or confined to another thread (WrongThreadException)
                            platform.recordMisuse("ncclCommSplit's job wrote rank $r's child into an out-pointer that was already freed ($e)")
                        }
                    }
                    clique.members[r]?.state?.compareAndSet(NcclResult.IN_PROGRESS, NcclResult.SUCCESS)
                }
            }
        }
        // N4: ncclCommSplit returns res, the result of ncclCommInitChildComm only: the trailing
        // NCCLCHECK(ncclGroupEndInternal()) lets ncclInProgress pass, so a non-blocking split returns
        // ncclSuccess while the job still runs and *newcomm is still NULL.
        if (!blocking) {
            lifetimes.launched(listOfNotNull(parent, child), "rank ${parent.rank}'s ncclCommSplit")
            return NcclResult.SUCCESS
        }
        while (parent.state.get() == NcclResult.IN_PROGRESS) { if (clique.broken != 0) return clique.broken; Thread.sleep(1) }
        return parent.state.get()
    }

    override fun commFinalize(comm: Long): Int {
        val c = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        // N11: ncclCommEnsureReady first (a busy communicator: ncclInvalidArgument, and the state becomes
        // that error), then a second finalize is ncclInvalidArgument and leaves the state so.
        val s = c.state.get()
        if (s == NcclResult.IN_PROGRESS || c.finalized) {
            platform.recordMisuse(
                if (c.finalized) "ncclCommFinalize called twice on rank ${c.rank}" else "ncclCommFinalize on rank ${c.rank} while a call is still in progress",
            )
            c.state.set(NcclResult.INVALID_ARGUMENT)
            return NcclResult.INVALID_ARGUMENT
        }
        if (s != NcclResult.SUCCESS) return s
        if (groupDepth.get() > 0) {
            platform.recordMisuse(
                "ncclCommFinalize inside an open group on thread '${Thread.currentThread().name}': it joins the group (an async job) " +
                    "and runs only at its ncclGroupEnd (docs/nccl-semantics.md N10, N11)",
            )
        }
        c.finalized = true
        lifetimes.groupEnds("ncclCommFinalize on rank ${c.rank}")
        // ncclCommFinalize (init.cc:2783) flushes the communicator's outstanding work asynchronously.
        if (c.blocking) {
            while (c.inFlight.get() > 0 && !c.aborted) Thread.sleep(1)
            return NcclResult.SUCCESS
        }
        c.state.compareAndSet(NcclResult.SUCCESS, NcclResult.IN_PROGRESS)
        lifetimes.launched(listOf(c), "rank ${c.rank}'s ncclCommFinalize")
        Thread.ofPlatform().daemon(true).name("sim-nccl-finalize").start {
            while (c.inFlight.get() > 0 && !c.aborted) Thread.sleep(1)
            c.state.compareAndSet(NcclResult.IN_PROGRESS, NcclResult.SUCCESS)
        }
        return NcclResult.IN_PROGRESS
    }

    override fun commAbort(comm: Long): Int {
        val c = platform.remove<SimComm>(comm, "ncclCommAbort") ?: return NcclResult.INVALID_ARGUMENT
        if (groupDepth.get() > 0) {
            platform.recordMisuse("ncclCommAbort inside an open group on thread '${Thread.currentThread().name}': the abort joins the group and runs only at its ncclGroupEnd (init.cc:3035-3060)")
        }
        lifetimes.abort(c, c.rank) {
            // ncclCommEnsureReady joins the communicator's own group job first (ncclGroupJobAbort), then the
            // abort's own group end runs (src/init.cc ncclCommAbort).
            lifetimes.groupEnds("ncclCommAbort on rank ${c.rank}", joinsFirst = c)
            lifetimes.joined(c)
            c.aborted = true
            c.userOps.clear() // commFree frees the communicator's operators
            if (platform.detectPeerFailure) runCatching { c.clique.broken = NcclResult.REMOTE_ERROR }
            storeHalfBuiltChildren(c)
        }
        return NcclResult.SUCCESS
    }

    /**
     * A split of [parent] that never completed (a peer never called it): the abort's child abort flag
     * (`comm->childAbortFlag`, src/init.cc ncclCommAbort) makes the child's init job fail, and the
     * job still stores the half-built child into the caller's out-pointer at its `exit:` (src/init.cc
     * ncclCommInitRankFunc: `fail:` sets `initState`, then `exit:` stores `*newcomm`). That child is
     * live until the caller aborts it ("abort any new communicator returned", usage/communicators.rst).
     */
    private fun storeHalfBuiltChildren(parent: SimComm) {
        val clique = runCatching { parent.clique }.getOrNull() ?: return
        for (round in clique.splits.values) {
            val ch = round.children[parent.rank] as SimComm? ?: continue
            val cell = round.cells[parent.rank] ?: continue
            round.children[parent.rank] = null
            ch.clique = Clique(1)
            // N4: the failed child's own asyncResult stays 0 (the error is the parent's); it is not built.
            ch.built = false
            ch.state.set(NcclResult.SUCCESS)
            ch.lastError = "the split's init job was aborted with its parent"
            try {
                cell.set(ValueLayout.JAVA_LONG, 0, platform.handle(ch))
            } catch (e: RuntimeException) {
                platform.recordMisuse("ncclCommSplit's job wrote rank ${parent.rank}'s half-built child into an out-pointer that was already freed ($e)")
            }
        }
    }

    override fun commDestroy(comm: Long): Int {
        val c = platform.remove<SimComm>(comm, "ncclCommDestroy") ?: return NcclResult.INVALID_ARGUMENT
        lifetimes.groupEnds("ncclCommDestroy on rank ${c.rank}", joinsFirst = c)
        if (!c.finalized) platform.recordMisuse("ncclCommDestroy without ncclCommFinalize on rank ${c.rank} (usage/communicators.rst:330-350)")
        c.aborted = true
        c.userOps.clear()
        if (platform.detectPeerFailure) runCatching { c.clique.broken = NcclResult.REMOTE_ERROR }
        return NcclResult.SUCCESS
    }

    override fun commGetAsyncError(comm: Long, asyncError: IntArray): Int {
        val c = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        return lifetimes.call(c, "ncclCommGetAsyncError", c.rank) {
            val delay = platform.slowAsyncErrorPollMillis
            if (delay > 0) Thread.sleep(delay)
            asyncError[0] = c.state.get()
            // A linked group job is joined once the state is ncclSuccess (src/init.cc ncclCommGetAsyncError).
            if (asyncError[0] == NcclResult.SUCCESS) lifetimes.joined(c)
            NcclResult.SUCCESS
        }
    }

    override fun commCount(comm: Long, count: IntArray): Int {
        val c = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        ready(c).let { if (it != NcclResult.SUCCESS) return it } // N15: needs a ready communicator
        count[0] = c.clique.size
        return NcclResult.SUCCESS
    }

    override fun commUserRank(comm: Long, rank: IntArray): Int {
        val c = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        ready(c).let { if (it != NcclResult.SUCCESS) return it }
        rank[0] = c.rank
        return NcclResult.SUCCESS
    }

    /** Checks shared by every enqueue (init.cc:422-436 `ncclCommEnsureReady`), or the error code. */
    private fun ready(sc: SimComm): Int {
        lifetimes.call(sc, "a call", sc.rank) {}
        if (!sc.built) {
            platform.recordMisuse(
                "rank ${sc.rank} used a communicator that is not built: its ncclCommInitRankConfig was issued inside an open group " +
                    "whose ncclGroupEnd has not run (docs/nccl-semantics.md N3), or its split failed (N4)",
            )
            return NcclResult.INVALID_USAGE
        }
        val s = sc.state.get()
        if (s == NcclResult.IN_PROGRESS) {
            platform.recordMisuse("rank ${sc.rank} used its communicator before the previous call returned ncclSuccess")
            return NcclResult.INVALID_ARGUMENT
        }
        return if (s != NcclResult.SUCCESS) s else NcclResult.SUCCESS
    }

    private fun collective(comm: Long, stream: Long, c: Contribution, sendBytes: Long, recvBytes: Long): Int {
        val sc = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        val st = platform.lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
        ready(sc).let { if (it != NcclResult.SUCCESS) return it }
        if (!knownType(c.dtype)) return NcclResult.INVALID_ARGUMENT
        val call = if (c.op in NcclRedOp.SUM..NcclRedOp.AVG) c else {
            // A user operator, resolved now as hostToDevRedOp does at the enqueue (src/enqueue.cc).
            val user = sc.userOps[c.op]
            if (user == null) {
                platform.recordMisuse("rank ${sc.rank} called ${c.kind} with reduction operator ${c.op}, which is not live on its communicator (destroyed, or never created)")
                sc.lastError = "operator ${c.op} is unknown to this communicator"
                return NcclResult.INVALID_ARGUMENT
            }
            if (user.datatype != c.dtype) {
                sc.lastError = "Data type supplied to user-created ncclRedOp_t does not match type given to reduction operation"
                return NcclResult.INVALID_ARGUMENT
            }
            Contribution(c.kind, c.send, c.recv, c.count, c.dtype, NcclRedOp.NUM_OPS, c.root, user.factor)
        }
        try {
            memory.checkDeviceBuffer(call.send, sendBytes)
            memory.checkDeviceBuffer(call.recv, recvBytes)
        } catch (f: SimFault) {
            sc.lastError = f.message
            return f.nccl
        }
        if (sc.clique.size == 1) {
            // Every enqueue brackets itself with ncclGroupStartInternal/ncclGroupEndInternal (src/enqueue.cc ncclEnqueueCheck).
            if (groupDepth.get() == 0) lifetimes.groupEnds("${c.kind} on rank ${sc.rank}")
            return oneRank(sc, st, call, sendBytes)
        }
        return issue(collectiveKernel(sc, st, call))
    }

    /**
     * N8: a communicator of one rank launches at the call, inside a group or not, and returns
     * ncclSuccess (`src/enqueue.cc` `taskAppend`: `ncclLaunchOneRank`, then no task is appended):
     * out of place a copy on the stream (`src/device/onerank.cu`), in place nothing; Avg on floating
     * point runs a scaling kernel (a PreMulSum by 1/1, which leaves the data as it is).
     */
    private fun oneRank(sc: SimComm, st: SimStream, c: Contribution, bytes: Long): Int {
        val scales = c.op == NcclRedOp.AVG && NcclDataType.toDType(c.dtype)?.isFloatingPoint == true
        val userPreMulSum = c.op == NcclRedOp.NUM_OPS && c.kind != "broadcast" && c.kind != "allGather"
        if ((scales || userPreMulSum) && (c.dtype == NcclDataType.FLOAT8E4M3 || c.dtype == NcclDataType.FLOAT8E5M2)) {
            // ncclLaunchOneRank's FP8 cases sit under `#if ... && __CUDA_ARCH__ >= 900`, which host code
            // never defines: FP8 reaches `default: return ncclInvalidArgument` before any launch
            // (src/device/onerank.cu, v2.24.3-1 to v2.30.7-1; taskAppend returns it from ncclEnqueueCheck,
            // src/enqueue.cc). Seen on an H200 with NCCL 2.28.9 ("enqueue.cc:2570 -> 4").
            sc.lastError = "ncclLaunchOneRank has no pre-multiplying kernel for 8-bit floats in host code"
            return NcclResult.INVALID_ARGUMENT
        }
        noteLaunch(sc, null)
        if (userPreMulSum) {
            // PreMulSum on one rank: the scaling kernel, out = in * scalar.
            st.enqueue {
                val result = results.reduce(listOf(memory.resolve(c.send, bytes)), c.dtype, c.op, c.count, listOf(c))
                MemorySegment.copy(result, 0, memory.resolve(c.recv, bytes), 0, bytes)
            }
            return NcclResult.SUCCESS
        }
        if (c.send != c.recv) {
            st.enqueue { MemorySegment.copy(memory.resolve(c.send, bytes), 0, memory.resolve(c.recv, bytes), 0, bytes) }
        } else if (scales) {
            st.enqueue { memory.resolve(c.recv, bytes) }
        }
        return NcclResult.SUCCESS
    }

    private fun size(dt: Int): Long = NcclDataType.toDType(dt)?.byteSize?.toLong() ?: 1L

    private fun nranks(comm: Long): Long = (platform.lookup<SimComm>(comm)?.clique?.size ?: 1).toLong()

    override fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        collective(comm, stream, Contribution("allReduce", sendBuf, recvBuf, count, datatype, op, 0), count * size(datatype), count * size(datatype))

    override fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int =
        collective(comm, stream, Contribution("broadcast", sendBuf, recvBuf, count, datatype, 0, root), count * size(datatype), count * size(datatype))

    override fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int =
        collective(comm, stream, Contribution("reduce", sendBuf, recvBuf, count, datatype, op, root), count * size(datatype), count * size(datatype))

    override fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int =
        collective(comm, stream, Contribution("allGather", sendBuf, recvBuf, sendCount, datatype, 0, 0), sendCount * size(datatype), sendCount * size(datatype) * nranks(comm))

    override fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        collective(comm, stream, Contribution("reduceScatter", sendBuf, recvBuf, recvCount, datatype, op, 0), recvCount * size(datatype) * nranks(comm), recvCount * size(datatype))

    override fun redOpCreatePreMulSum(op: IntArray, scalar: MemorySegment, datatype: Int, residence: Int, comm: Long): Int {
        val sc = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        ready(sc).let { if (it != NcclResult.SUCCESS) return it } // ncclCommEnsureReady
        val dt = NcclDataType.toDType(datatype) ?: return NcclResult.INVALID_ARGUMENT
        if (residence != NcclRedOp.SCALAR_HOST_IMMEDIATE) {
            sc.lastError = "simulated NCCL: only ncclScalarHostImmediate scalars are simulated"
            return NcclResult.INVALID_ARGUMENT
        }
        val factor = when (dt) {
            DType.Float64 -> scalar.get(ValueLayout.JAVA_DOUBLE, 0)
            DType.Float32 -> scalar.get(ValueLayout.JAVA_FLOAT, 0).toDouble()
            DType.Float16 -> HalfPrecision.float16ToFloat(scalar.get(ValueLayout.JAVA_SHORT, 0)).toDouble()
            DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(scalar.get(ValueLayout.JAVA_SHORT, 0)).toDouble()
            // NCCL takes integer scalars too; tpcomm never makes one (PreMulSum is floating-point only).
            DType.Int8 -> scalar.get(ValueLayout.JAVA_BYTE, 0).toDouble()
            DType.UInt8 -> (scalar.get(ValueLayout.JAVA_BYTE, 0).toInt() and 0xFF).toDouble()
            DType.Int32 -> scalar.get(ValueLayout.JAVA_INT, 0).toDouble()
            DType.Int64 -> scalar.get(ValueLayout.JAVA_LONG, 0).toDouble()
            else -> {
                // NCCL takes a scalar of any type; tpcomm makes Float32/Float64/Float16/BFloat16 ones only.
                sc.lastError = "simulated NCCL: PreMulSum scalars of $dt are not simulated"
                return NcclResult.INVALID_ARGUMENT
            }
        }
        synchronized(sc) {
            val handle = NcclRedOp.NUM_OPS + sc.nextUserOp++
            sc.userOps[handle] = UserOp(datatype, factor)
            op[0] = handle
        }
        return NcclResult.SUCCESS
    }

    override fun redOpDestroy(op: Int, comm: Long): Int {
        if (op in 0 until NcclRedOp.NUM_OPS) return NcclResult.INVALID_ARGUMENT // "operator is a NCCL builtin"
        val sc = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        if (sc.userOps.remove(op) == null) {
            platform.recordMisuse("rank ${sc.rank} destroyed reduction operator $op, which is not live on its communicator (destroyed twice, or never created)")
            return NcclResult.INVALID_ARGUMENT // "operator unknown to this communicator"
        }
        return NcclResult.SUCCESS
    }

    override fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int {
        val sc = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        val st = platform.lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
        ready(sc).let { if (it != NcclResult.SUCCESS) return it }
        if (peer !in 0 until sc.clique.size) return NcclResult.INVALID_ARGUMENT
        val bytes = count * size(datatype)
        try { memory.checkDeviceBuffer(sendBuf, bytes) } catch (f: SimFault) { sc.lastError = f.message; return f.nccl }
        var message: Message? = null
        return issue(
            PendingKernel(
                sc, st,
                post = {
                    val m = Message(memory.resolve(sendBuf, bytes).toArray(ValueLayout.JAVA_BYTE))
                    message = m
                    sc.clique.channel(sc.rank, peer).add(m)
                },
                waitsLast = true,
                connection = Triple(sc.rank, peer, 0),
            ) {
                // Beyond the connection buffer the sender waits for the receiver to take the data.
                val m = message ?: return@PendingKernel
                if (m.bytes.size > platform.p2pBufferBytes) awaitPeers(m.consumed, sc)
            },
        )
    }

    override fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int {
        val sc = platform.lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
        val st = platform.lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
        ready(sc).let { if (it != NcclResult.SUCCESS) return it }
        if (peer !in 0 until sc.clique.size) return NcclResult.INVALID_ARGUMENT
        val bytes = count * size(datatype)
        try { memory.checkDeviceBuffer(recvBuf, bytes) } catch (f: SimFault) { sc.lastError = f.message; return f.nccl }
        return issue(
            PendingKernel(sc, st, post = {}, connection = Triple(peer, sc.rank, 1)) {
                val box = sc.clique.channel(peer, sc.rank)
                var msg: Message? = null
                while (msg == null) {
                    msg = box.poll(1, TimeUnit.MILLISECONDS)
                    if (msg == null) checkAlive(sc)
                }
                msg.consumed.countDown()
                if (msg.bytes.size.toLong() != bytes) {
                    throw SimFault(NcclResult.INVALID_USAGE, CUDA_LAUNCH_FAILURE, "simulated NCCL: rank $peer sent ${msg.bytes.size} bytes, rank ${sc.rank} receives $bytes")
                }
                MemorySegment.copy(MemorySegment.ofArray(msg.bytes), 0, memory.resolve(recvBuf, bytes), 0, bytes)
            },
        )
    }

    override fun groupStart(): Int {
        groupDepth.set(groupDepth.get() + 1)
        return NcclResult.SUCCESS
    }

    override fun groupEnd(): Int {
        val depth = groupDepth.get()
        if (depth == 0) return NcclResult.INVALID_USAGE
        groupDepth.set(depth - 1)
        if (depth > 1) return NcclResult.SUCCESS
        lifetimes.groupEnds("ncclGroupEnd")
        val inits = ArrayList(deferredInits.get())
        deferredInits.get().clear()
        inits.forEach { it() }
        val ops = ArrayList(groupOps.get())
        groupOps.get().clear()
        if (ops.isEmpty()) return if (inits.isEmpty()) NcclResult.SUCCESS else NcclResult.IN_PROGRESS
        return launchMaybeAsync(ops)
    }

    override fun getErrorString(result: Int): String = "simulated ${NcclResult.name(result)}"

    override fun getLastError(comm: Long): String? = platform.lookup<SimComm>(comm)?.lastError

    /** The platform's [SimulatedGpuPlatform.environment] (N6). */
    override fun getEnv(name: String): String? = platform.environment[name]

    private companion object {
        val RANDOM = SecureRandom()
    }
}
