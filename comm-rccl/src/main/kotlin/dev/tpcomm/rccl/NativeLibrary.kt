package dev.tpcomm.rccl

import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.SymbolLookup
import java.lang.invoke.MethodHandle

/**
 * A shared library opened with `dlopen` through `java.lang.foreign` from the first of [candidates]
 * that loads, kept open for the life of the process. Thread-safe.
 *
 * @throws UnsatisfiedLinkError naming every candidate tried when none loads.
 */
internal class NativeLibrary(val what: String, candidates: List<String>) {
    private val linker = Linker.nativeLinker()
    private val lookup: SymbolLookup
    val loadedFrom: String

    init {
        val errors = ArrayList<String>()
        var found: Pair<String, SymbolLookup>? = null
        for (c in candidates) {
            try {
                found = c to SymbolLookup.libraryLookup(c, Arena.global())
                break
            } catch (e: IllegalArgumentException) {
                errors += "$c (${e.message})"
            }
        }
        val (name, l) = found ?: throw UnsatisfiedLinkError("$what could not be opened; tried ${errors.joinToString("; ")}")
        loadedFrom = name
        lookup = l
    }

    /** A downcall handle for [symbol]; a missing symbol is an [UnsatisfiedLinkError] naming it. */
    fun function(symbol: String, descriptor: FunctionDescriptor): MethodHandle {
        val address = lookup.find(symbol).orElseThrow { UnsatisfiedLinkError("$what ($loadedFrom) has no symbol $symbol") }
        return linker.downcallHandle(address, descriptor)
    }

    /**
     * A downcall handle for [symbol], or null when the library does not export it: for functions
     * newer than the oldest supported release, resolved on first use so that the library loads
     * without them.
     */
    fun optionalFunction(symbol: String, descriptor: FunctionDescriptor): MethodHandle? =
        lookup.find(symbol).map { linker.downcallHandle(it, descriptor) }.orElse(null)

    internal companion object {
        /** Opens [path] directly (tests). */
        fun open(what: String, path: String): NativeLibrary = NativeLibrary(what, listOf(path))

        /** Candidates for a ROCm library: an explicit path from [envVariable], the loader's search path, then /opt/rocm/lib. */
        fun candidates(envVariable: String, vararg names: String): List<String> = buildList {
            System.getenv(envVariable)?.takeIf { it.isNotBlank() }?.let { add(it) }
            addAll(names)
            System.getenv("ROCM_PATH")?.takeIf { it.isNotBlank() }?.let { root -> names.forEach { add("$root/lib/$it") } }
            names.forEach { add("/opt/rocm/lib/$it") }
        }
    }
}
