package dev.tpcomm.spi

import dev.tpcomm.Device
import java.util.ServiceConfigurationError
import java.util.ServiceLoader
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicBoolean

/**
 * The process-wide set of [DeviceStaging]s that backends consult for device tensors they cannot
 * hand to their library directly.
 *
 * [find] returns the most recently [register]ed staging that accepts the device; when none does, the
 * stagings offered by the [DeviceStagingProvider]s on the classpath (loaded once, on the first
 * [find], in `ServiceLoader` order). Thread-safe; [find] does not lock.
 */
public object DeviceStagingRegistry {
    private val registered = CopyOnWriteArrayList<Registration>()
    private val discovered: Discovery by lazy { discover() }

    /**
     * Adds [staging] (it then wins over every earlier registration and every discovered staging
     * that accepts the same devices). Closing the returned handle removes this registration again;
     * closing it twice does nothing. Registering the same staging twice makes two registrations.
     */
    @JvmStatic
    public fun register(staging: DeviceStaging): AutoCloseable = Registration(staging).also { registered += it }

    /** The staging to use for [device], or null when no registered or discovered staging accepts it (as for the host). */
    @JvmStatic
    public fun find(device: Device): DeviceStaging? {
        if (!device.isGpu) return null
        val snapshot = registered.toTypedArray()
        for (i in snapshot.indices.reversed()) {
            val s = snapshot[i].staging
            if (s.accepts(device)) return s
        }
        return discovered.stagings.firstOrNull { it.accepts(device) }
    }

    /**
     * Why the providers on the classpath that offer no staging did not (one line each: provider
     * class and reason, or "not available here"); empty when there are none. Loads the providers
     * if [find] has not yet. For error messages.
     */
    @JvmStatic
    public val unavailable: List<String> get() = discovered.notes

    private class Registration(val staging: DeviceStaging) : AutoCloseable {
        private val closed = AtomicBoolean(false)

        override fun close() {
            if (closed.compareAndSet(false, true)) registered.remove(this)
        }
    }

    private class Discovery(val stagings: List<DeviceStaging>, val notes: List<String>)

    private fun discover(): Discovery {
        val stagings = ArrayList<DeviceStaging>()
        val notes = ArrayList<String>()
        val iterator = ServiceLoader.load(DeviceStagingProvider::class.java, DeviceStagingRegistry::class.java.classLoader).iterator()
        // A broken entry throws from hasNext/next; the iterator then moves on to the next entry.
        var errors = 0
        while (errors < MAX_BROKEN_ENTRIES) {
            val provider = try {
                if (!iterator.hasNext()) break
                iterator.next()
            } catch (e: ServiceConfigurationError) {
                errors++
                notes += "a DeviceStagingProvider entry could not be loaded: ${e.message}"
                continue
            }
            val name = provider.javaClass.name
            try {
                val s = provider.create()
                if (s != null) stagings += s else notes += "$name: not available here"
            } catch (e: Exception) {
                notes += "$name: ${e.javaClass.simpleName}: ${e.message}"
            } catch (e: LinkageError) {
                notes += "$name: ${e.javaClass.simpleName}: ${e.message}"
            }
        }
        return Discovery(stagings, notes)
    }

    private const val MAX_BROKEN_ENTRIES = 64
}
