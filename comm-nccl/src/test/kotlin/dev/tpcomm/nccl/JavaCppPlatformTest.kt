package dev.tpcomm.nccl

import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.types.shouldBeSameInstanceAs

/**
 * Issue 18, finding 7, on the real binding: the engine gives every communicator of a device one
 * native thread, found by the runtime it is given (comm-gpu `DeviceThreads`). If each
 * `Comm.create("nccl")` got a runtime of its own, two independent worlds on one GPU would launch
 * from two threads again. The JavaCPP platform hands out one runtime and one NCCL API per process
 * (no native library is loaded by asking for them).
 */
class JavaCppPlatformTest : FunSpec({
    test("one CUDA runtime and one NCCL API per process, so communicators of a device share its native thread") {
        JavaCppPlatform.runtime() shouldBeSameInstanceAs JavaCppPlatform.runtime()
        JavaCppPlatform.api() shouldBeSameInstanceAs JavaCppPlatform.api()
    }
})
