package dev.tpcomm.rccl

import dev.tpcomm.gpu.NcclCommunicator
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldNotContain

/**
 * comm-rccl depends on comm-gpu's engine, which has no JavaCPP dependency, with no exclusion: the test
 * classpath is comm-rccl's whole dependency tree (compile, runtime and test scopes), so no
 * org.bytedeco artifact and no comm-nccl class reaching it means an AMD user never loads CUDA jars.
 */
class NoCudaJarsTest : FunSpec({
    test("comm-rccl's dependency tree holds no org.bytedeco jar and no comm-nccl; their classes are not loadable") {
        val classpath = System.getProperty("java.class.path").lowercase()
        classpath shouldNotContain "bytedeco"
        classpath shouldNotContain "comm-nccl"
        shouldThrow<ClassNotFoundException> { Class.forName("dev.tpcomm.nccl.NcclBackendFactory") }
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.cuda.global.nccl") }
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.cuda.global.cudart") }
        shouldThrow<ClassNotFoundException> { Class.forName("org.bytedeco.javacpp.Pointer") }
    }

    test("the engine loads and initialises without them") {
        Class.forName(NcclCommunicator::class.java.name, true, javaClass.classLoader).simpleName shouldBe "NcclCommunicator"
        NcclConnector.UNIQUE_ID_BYTES shouldBe 128
        SimulatedGpuPlatform().use { it.deviceCount shouldBe 8 }
    }
})
