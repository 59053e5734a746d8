package dev.tpcomm.memory

import java.io.File
import java.lang.management.ManagementFactory
import java.util.Locale

/**
 * Where the budget of native host memory ([NativeMemoryBudget]) comes from, in this order:
 *
 * 1. the system property `tpcomm.memory.budget` ([PROPERTY]);
 * 2. the environment variable `TPCOMM_MEMORY_BUDGET` ([ENV]);
 * 3. `-XX:MaxDirectMemorySize`, when it was set explicitly (the user already said how much
 *    native memory outside the heap this JVM may hold);
 * 4. otherwise [MACHINE_PERCENT] % of the smaller of the cgroup's memory limit (v2 `memory.max`,
 *    v1 `memory.limit_in_bytes`) and the machine's physical memory.
 *
 * Why half: the JVM's default heap is a quarter of the same memory (`MaxRAMPercentage=25`); tensors
 * are the bulk of a training process's data, so they get twice that, and the last quarter stays for
 * the JVM's own native memory (code cache, thread stacks, GC structures), the OS and other
 * processes. Several ranks of a job on one machine share it: set the budget explicitly there
 * (for instance memory / ranks per node).
 *
 * Sizes are bytes or a number with a unit `k`, `m`, `g` or `t` (powers of 1024, case-insensitive,
 * an optional `b` or `ib` after it: `512m`, `1g`, `1.5GiB`, `1073741824`); `unlimited` turns the
 * budget off. Stateless and thread-safe.
 */
internal object HostMemoryBudgetSettings {
    const val PROPERTY: String = "tpcomm.memory.budget"
    const val ENV: String = "TPCOMM_MEMORY_BUDGET"
    const val MACHINE_PERCENT: Int = 50

    /** What the settings resolved to: [bytes] of budget, [source] in words, or the [error] of a value that is not a size. */
    class Resolved(@JvmField val bytes: Long, @JvmField val source: String, @JvmField val error: String? = null)

    private val SIZE = Regex("""(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?""", RegexOption.IGNORE_CASE)

    /** Bytes that [text] names ([Long.MAX_VALUE] for `unlimited`), or null when it is not a size or not positive. */
    fun parseSize(text: String): Long? {
        val t = text.trim()
        if (t.equals("unlimited", ignoreCase = true)) return Long.MAX_VALUE
        val m = SIZE.matchEntire(t) ?: return null
        val shift = when (m.groupValues[2].lowercase()) {
            "" -> 0
            "k" -> 10
            "m" -> 20
            "g" -> 30
            else -> 40
        }
        val number = m.groupValues[1]
        val bytes = if ('.' in number) {
            val d = number.toDouble() * (1L shl shift).toDouble()
            if (d >= Long.MAX_VALUE.toDouble()) return null
            d.toLong()
        } else {
            val n = number.toLongOrNull() ?: return null
            if (n > (Long.MAX_VALUE shr shift)) return null
            n shl shift
        }
        return bytes.takeIf { it > 0 }
    }

    /** The budget from explicit inputs (each null when absent); [fromEnvironment] reads them from this JVM. */
    fun resolve(property: String?, env: String?, maxDirectMemory: Long?, cgroupLimit: Long?, physicalMemory: Long?): Resolved {
        for ((value, name) in listOf(property to "-D$PROPERTY", env to ENV)) {
            if (value.isNullOrBlank()) continue
            val bytes = parseSize(value)
                ?: return Resolved(
                    Long.MAX_VALUE, "$name=$value",
                    "$name='$value' is not a memory size; use bytes or a number with k, m, g or t (for example 512m or 1g), or unlimited",
                )
            return Resolved(bytes, "$name=$value")
        }
        if (maxDirectMemory != null && maxDirectMemory > 0) return Resolved(maxDirectMemory, "-XX:MaxDirectMemorySize=${formatBytes(maxDirectMemory)}")
        val machine = listOfNotNull(cgroupLimit?.takeIf { it > 0 }, physicalMemory?.takeIf { it > 0 }).minOrNull()
            ?: return Resolved(Long.MAX_VALUE, "no limit found (neither a cgroup limit nor the physical memory size could be read)")
        val what = if (cgroupLimit != null && cgroupLimit > 0 && cgroupLimit == machine) "the cgroup memory limit" else "physical memory"
        return Resolved(machine / 100 * MACHINE_PERCENT + machine % 100 * MACHINE_PERCENT / 100, "$MACHINE_PERCENT% of $what (${formatBytes(machine)})")
    }

    /**
     * The budget of this JVM, from its system properties, environment, flags and machine. The JVM's
     * flags and the machine are asked (through `java.lang.management`, whose first use costs tens of
     * milliseconds) only when neither the property nor the environment variable is set.
     */
    fun fromEnvironment(): Resolved {
        val property = System.getProperty(PROPERTY)
        val env = System.getenv(ENV)
        if (!property.isNullOrBlank() || !env.isNullOrBlank()) return resolve(property, env, null, null, null)
        return resolve(null, null, explicitMaxDirectMemory(), cgroupLimit(), physicalMemory())
    }

    /** `-XX:MaxDirectMemorySize` in bytes when set explicitly (flags, `JAVA_TOOL_OPTIONS`, ...), else null. */
    fun explicitMaxDirectMemory(): Long? {
        try {
            val bean = ManagementFactory.getPlatformMXBean(com.sun.management.HotSpotDiagnosticMXBean::class.java)
            val option = bean.getVMOption("MaxDirectMemorySize")
            if (option.origin == com.sun.management.VMOption.Origin.DEFAULT) return null
            return option.value.toLongOrNull()?.takeIf { it > 0 }
        } catch (_: Throwable) {
            // Not HotSpot, or java.management absent: read the command line instead.
        }
        return try {
            ManagementFactory.getRuntimeMXBean().inputArguments
                .lastOrNull { it.startsWith("-XX:MaxDirectMemorySize=") }
                ?.substringAfter('=')?.let(::parseSize)
        } catch (_: Throwable) {
            null
        }
    }

    /** The cgroup's memory limit in bytes (v2 `memory.max`, else v1 `memory.limit_in_bytes`), null when unlimited or unreadable. */
    fun cgroupLimit(): Long? {
        for (path in listOf("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
            val text = try {
                File(path).takeIf { it.canRead() }?.readText()?.trim()
            } catch (_: Exception) {
                null
            } ?: continue
            val v = text.toLongOrNull() ?: return null // "max": no limit
            return v.takeIf { it in 1 until (1L shl 60) } // v1 reports "no limit" as a huge number
        }
        return null
    }

    /** The machine's physical memory in bytes, or null when the JVM cannot say. */
    fun physicalMemory(): Long? = try {
        (ManagementFactory.getOperatingSystemMXBean() as? com.sun.management.OperatingSystemMXBean)?.totalMemorySize?.takeIf { it > 0 }
    } catch (_: Throwable) {
        null
    }

    /** [bytes] as `512.0 MiB`, `1.0 GiB` (or `unlimited`). */
    fun formatBytes(bytes: Long): String = when {
        bytes == Long.MAX_VALUE -> "unlimited"
        bytes >= 1L shl 30 -> String.format(Locale.ROOT, "%.1f GiB", bytes / (1L shl 30).toDouble())
        bytes >= 1L shl 20 -> String.format(Locale.ROOT, "%.1f MiB", bytes / (1L shl 20).toDouble())
        bytes >= 1L shl 10 -> String.format(Locale.ROOT, "%.1f KiB", bytes / (1L shl 10).toDouble())
        else -> "$bytes B"
    }
}
