package dev.tpcomm.mpi

import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.invoke.MethodHandle

/**
 * The few libc functions the loader needs (`dlopen`, `dlsym`, `dlerror`, `setenv`, `getenv`),
 * through FFM. Thread-safe as libc's are (setenv is not: call it before other threads read the
 * environment, as the loader does before `MPI_Init`).
 */
internal object Libc {
    const val RTLD_NOW: Int = 0x2
    const val RTLD_GLOBAL: Int = 0x100

    private val linker = Linker.nativeLinker()
    private val lookup = linker.defaultLookup()

    private fun handle(name: String, fd: FunctionDescriptor): MethodHandle =
        linker.downcallHandle(lookup.find(name).orElseThrow { IllegalStateException("libc has no $name") }, fd)

    @JvmField val DLOPEN: MethodHandle = handle("dlopen", FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT))
    @JvmField val DLSYM: MethodHandle = handle("dlsym", FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS))
    @JvmField val DLERROR: MethodHandle = handle("dlerror", FunctionDescriptor.of(ValueLayout.ADDRESS))
    @JvmField val SETENV: MethodHandle = handle("setenv", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT))
    @JvmField val GETENV: MethodHandle = handle("getenv", FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS))

    /** `dlopen(path, flags)`: the library handle, or 0 with [dlerror] saying why. */
    fun dlopen(path: String, flags: Int): Long = Arena.ofConfined().use { a ->
        (DLOPEN.invokeExact(a.allocateFrom(path), flags) as MemorySegment).address()
    }

    /** `dlsym(handle, name)`: the symbol's address or 0. */
    fun dlsym(library: Long, name: String): Long = Arena.ofConfined().use { a ->
        (DLSYM.invokeExact(MemorySegment.ofAddress(library), a.allocateFrom(name)) as MemorySegment).address()
    }

    /** The last dynamic-linking error, or null. */
    fun dlerror(): String? {
        val p = DLERROR.invokeExact() as MemorySegment
        return if (p.address() == 0L) null else p.reinterpret(4096).getString(0)
    }

    /**
     * libc `setenv`: changes the process environment that native libraries read (Java's
     * `System.getenv` keeps its own copy). [overwrite] false keeps a value the user already set.
     */
    fun setenv(name: String, value: String, overwrite: Boolean): Boolean = Arena.ofConfined().use { a ->
        (SETENV.invokeExact(a.allocateFrom(name), a.allocateFrom(value), if (overwrite) 1 else 0) as Int) == 0
    }

    /** libc `getenv`: the native environment's value (sees what [setenv] changed), or null. */
    fun getenv(name: String): String? = Arena.ofConfined().use { a ->
        val p = GETENV.invokeExact(a.allocateFrom(name)) as MemorySegment
        if (p.address() == 0L) null else p.reinterpret(65536).getString(0)
    }
}
