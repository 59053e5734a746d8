package dev.tpcomm.coroutines

import java.lang.management.ManagementFactory
import java.lang.ref.WeakReference
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import javax.management.MBeanServerFactory
import javax.management.ObjectName

/**
 * The open [FlightRecorder]s of this JVM (weakly held): their MBeans and the shutdown hook that
 * dumps those with a dump directory when the JVM exits (a launcher killing the job, Ctrl-C, or a
 * normal exit with communicators still open). Thread-safe; registration is off every operation's path.
 *
 * The MBeans go to the platform MBean server. Building that server is a fresh JVM's costliest
 * step in tpcomm (every platform MXBean, JFR's included: about a second of a 2-core machine's
 * first communicator), so a communicator created before anyone built it does not wait for it: its
 * MBean is registered (and later unregistered, in that order) by one daemon thread,
 * `tpcomm-jmx`, shortly after. Where the server is already up (a JMX agent, JConsole attached,
 * an earlier registration done) registration is immediate, as before.
 */
internal object FlightRecorderRegistry {
    private val JMX: Boolean = System.getProperty("tpcomm.jmx", "true") != "false"
    private val open = ConcurrentHashMap<Long, Registration>()
    @Volatile private var hookInstalled = false

    /** [deferred]: the MBean was handed to the `tpcomm-jmx` thread, so its removal goes there too (after it). */
    private class Registration(recorder: FlightRecorder, val name: ObjectName?, val deferred: Boolean) {
        val ref = WeakReference(recorder)
    }

    /** The `tpcomm-jmx` thread: MBean work queued while the platform server was not yet built, in order. */
    private val jmx: ExecutorService by lazy {
        Executors.newSingleThreadExecutor { r -> Thread(r, "tpcomm-jmx").apply { isDaemon = true } }
    }

    /**
     * Whether the platform MBean server exists: `ManagementFactory.getPlatformMBeanServer` builds it
     * through `MBeanServerFactory.createMBeanServer`, which lists every server it built for
     * `findMBeanServer`; asking that list builds nothing.
     */
    private fun serverUp(): Boolean = try {
        MBeanServerFactory.findMBeanServer(null).isNotEmpty()
    } catch (_: Exception) {
        false
    }

    private fun registerMBean(what: String, bean: CommunicatorMBean, name: ObjectName) {
        try {
            ManagementFactory.getPlatformMBeanServer().registerMBean(bean, name)
        } catch (e: Exception) {
            System.err.println("tpcomm: could not register the MBean of $what: $e")
        }
    }

    fun register(recorder: FlightRecorder) {
        if (recorder.instance % 64 == 0L) sweep()
        var name: ObjectName? = null
        var deferred = false
        if (JMX) {
            try {
                val n = ObjectName(
                    "dev.tpcomm:type=Communicator,backend=${ObjectName.quote(recorder.backend)}," +
                        "communicator=${ObjectName.quote(recorder.communicator)},rank=${recorder.rank},instance=${recorder.instance}",
                )
                val bean = CommunicatorMBean(WeakReference(recorder))
                name = n
                val what = recorder.toString() // the queued task must not hold the recorder
                if (serverUp()) {
                    registerMBean(what, bean, n)
                } else {
                    deferred = true
                    jmx.execute { registerMBean(what, bean, n) }
                }
            } catch (e: Exception) {
                name = null
                System.err.println("tpcomm: could not register the MBean of $recorder: $e")
            }
        }
        open[recorder.instance] = Registration(recorder, name, deferred)
        if (recorder.dumpDirectory != null && !hookInstalled) installHook()
    }

    fun unregister(recorder: FlightRecorder) {
        open.remove(recorder.instance)?.let(::unregisterMBean)
    }

    /** Drops the registrations of recorders that were collected without being closed. */
    private fun sweep() {
        for ((k, r) in open) if (r.ref.get() == null && open.remove(k, r)) unregisterMBean(r)
    }

    private fun unregisterMBean(r: Registration) {
        val name = r.name ?: return
        if (r.deferred) jmx.execute { unregisterMBean(name) } else unregisterMBean(name)
    }

    private fun unregisterMBean(name: ObjectName) {
        try {
            ManagementFactory.getPlatformMBeanServer().unregisterMBean(name)
        } catch (_: Exception) {
            // Already gone.
        }
    }

    /** Writes every open recorder's dump (reason `shutdown`) to its directory; never throws. */
    fun writeShutdownDumps() {
        for (r in open.values) {
            val rec = r.ref.get() ?: continue
            if (!rec.isClosed) rec.writeQuietly(DumpReason.Shutdown)
        }
    }

    @Synchronized
    private fun installHook() {
        if (hookInstalled) return
        hookInstalled = true
        Runtime.getRuntime().addShutdownHook(
            Thread(::writeShutdownDumps, "tpcomm-flight-recorder-shutdown"),
        )
    }

    /** The MBean of one recorder; holds it weakly so that an unclosed communicator can still be collected. */
    private class CommunicatorMBean(private val ref: WeakReference<FlightRecorder>) : CommunicatorMXBean {
        private fun rec(): FlightRecorder? = ref.get()
        override val backend: String get() = rec()?.backend ?: ""
        override val communicator: String get() = rec()?.communicator ?: ""
        override val rank: Int get() = rec()?.rank ?: -1
        override val worldSize: Int get() = rec()?.worldSize ?: 0
        override val lastSequenceIssued: Long get() = rec()?.let { it.nextSequenceNumber - 1 } ?: 0
        override val lastSequenceCompleted: Long
            get() = rec()?.snapshot()?.lastOrNull { it.state == FlightRecorder.State.Completed }?.sequence ?: 0
        private fun flying() = rec()?.snapshot().orEmpty().filter { it.state == FlightRecorder.State.Started || it.state == FlightRecorder.State.Queued }
        override val inFlightCount: Int get() = flying().size
        override val oldestInFlightMillis: Long
            get() = flying().minOfOrNull { it.startedEpochMicros }?.let { (FlightRecorder.epochMicros() - it) / 1000 } ?: 0
        override val inFlight: List<String>
            get() {
                val now = FlightRecorder.epochMicros()
                return flying().map { "${describe(it)}: ${(now - it.startedEpochMicros) / 1000} ms" }
            }
        override val aborted: Boolean get() = rec()?.sawFailure ?: false
        override val abortCause: String get() = rec()?.failureCause ?: ""
        override val closed: Boolean get() = rec()?.isClosed ?: true
        override val recentRecords: List<String>
            get() = rec()?.snapshot().orEmpty().map {
                "${describe(it)} ${it.state}${it.outcome?.let { o -> " ${o.name.lowercase()}" } ?: ""}" +
                    (it.durationMicros?.let { d -> " ${d} us" } ?: "") + (it.error?.let { e -> " error=$e" } ?: "")
            }
        override fun dumpJson(): String = rec()?.dumpJson() ?: "{}"
        override fun dumpToFile(): String = (rec() ?: throw IllegalStateException("the communicator is gone")).dumpToFile().toString()
    }

    /** One line for a record: `seq 12 (collective 9) allReduce Float32[2] op=Sum`. */
    fun describe(r: FlightRecord): String = buildString {
        append("seq ").append(r.sequence)
        r.collectiveSequence?.let { append(" (collective ").append(it).append(')') }
        append(' ').append(r.operation)
        r.dtype?.let { append(' ').append(it) }
        r.shape?.let { append(it.joinToString(",", "[", "]")) }
        r.root?.let { append(" root=").append(it) }
        r.peer?.let { append(" peer=").append(it) }
        r.tag?.let { append(" tag=").append(it) }
        r.reduceOp?.let { append(" op=").append(it) }
        r.dim?.let { append(" dim=").append(it) }
    }
}
