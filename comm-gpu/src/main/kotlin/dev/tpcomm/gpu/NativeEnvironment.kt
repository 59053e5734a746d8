package dev.tpcomm.gpu

import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.ValueLayout
import java.lang.invoke.MethodHandle

/**
 * Sets variables in the process's C environment with libc's `setenv`, so that a native library
 * loaded or initialised afterwards (NCCL and RCCL read `NCCL_*` at their first initialisation)
 * sees them. `System.getenv` does not reflect these changes. Thread-safe (calls are serialised).
 */
public object NativeEnvironment {
    private val setenv: MethodHandle by lazy {
        val linker = Linker.nativeLinker()
        val symbol = linker.defaultLookup().find("setenv").orElseThrow { IllegalStateException("libc has no setenv") }
        linker.downcallHandle(symbol, FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT))
    }
    private val getenv: MethodHandle by lazy {
        val linker = Linker.nativeLinker()
        val symbol = linker.defaultLookup().find("getenv").orElseThrow { IllegalStateException("libc has no getenv") }
        linker.downcallHandle(symbol, FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS))
    }

    /** `setenv(name, value, overwrite)`; with [overwrite] false a variable already set is kept. */
    @JvmStatic
    @Synchronized
    public fun set(name: String, value: String, overwrite: Boolean = true) {
        require(name.isNotEmpty() && '=' !in name) { "environment variable name must be non-empty without '=': '$name'" }
        Arena.ofConfined().use { a ->
            val rc = setenv.invokeExact(a.allocateFrom(name), a.allocateFrom(value), if (overwrite) 1 else 0) as Int
            check(rc == 0) { "setenv($name) failed" }
        }
    }

    /** The C environment's value of [name] (sees [set]'s changes), or null. */
    @JvmStatic
    @Synchronized
    public fun get(name: String): String? = Arena.ofConfined().use { a ->
        val p = getenv.invokeExact(a.allocateFrom(name)) as java.lang.foreign.MemorySegment
        if (p.address() == 0L) null else p.reinterpret(Long.MAX_VALUE).getString(0)
    }
}
