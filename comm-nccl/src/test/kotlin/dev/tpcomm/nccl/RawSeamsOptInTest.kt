package dev.tpcomm.nccl

import dev.tpcomm.gpu.BinaryAnnotations
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain

/**
 * Issue 19, item 4: the raw native seams (their public constructors and factories reach
 * `ncclCommAbort`, `ncclGroupStart`, device frees) need the `@InternalTpcommApi` opt-in, so
 * Kotlin code outside tpcomm gets a compile error instead of a way to break a communicator. The
 * marker has binary retention: it is read from the class files, where the compiler reads it.
 */
class RawSeamsOptInTest : FunSpec({
    test("JavaCppNcclApi, JavaCppCudaRuntime and JavaCppPlatform require the InternalTpcommApi opt-in") {
        for (c in listOf("dev/tpcomm/nccl/javacpp/JavaCppNcclApi", "dev/tpcomm/nccl/javacpp/JavaCppCudaRuntime", "dev/tpcomm/nccl/javacpp/JavaCppPlatform")) {
            BinaryAnnotations.of(c).shouldContain("Ldev/tpcomm/InternalTpcommApi;")
        }
    }
})
