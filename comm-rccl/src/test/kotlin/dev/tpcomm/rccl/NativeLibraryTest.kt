package dev.tpcomm.rccl

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.ValueLayout.JAVA_INT

/**
 * Optional symbols (functions newer than the oldest supported release, such as `ncclCommSplit`)
 * are looked up without failing the load; required ones fail with the symbol's name. Run on this
 * machine's libc (no RCCL here): it has `getpid` and no NCCL symbol.
 */
class NativeLibraryTest : FunSpec({
    val libc = NativeLibrary.open("libc", "libc.so.6")

    test("a missing optional symbol is null, a present one is a working handle") {
        libc.optionalFunction("ncclCommSplit", FunctionDescriptor.of(JAVA_INT)) shouldBe null
        val getpid = libc.optionalFunction("getpid", FunctionDescriptor.of(JAVA_INT))
        getpid shouldNotBe null
        (getpid!!.invokeExact() as Int).toLong() shouldBe ProcessHandle.current().pid()
    }

    test("a missing required symbol fails with its name") {
        shouldThrow<UnsatisfiedLinkError> { libc.function("ncclCommFinalize", FunctionDescriptor.of(JAVA_INT)) }.message shouldContain "ncclCommFinalize"
    }
})
