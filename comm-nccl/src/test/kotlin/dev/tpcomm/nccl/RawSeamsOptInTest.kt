package dev.tpcomm.nccl

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import java.lang.classfile.Attributes
import java.lang.classfile.ClassFile

/**
 * Issue 19, item 4: the raw native seams (their public constructors and factories reach
 * `ncclCommAbort`, `ncclGroupStart`, device frees) need the `@InternalTpcommApi` opt-in, so
 * Kotlin code outside tpcomm gets a compile error instead of a way to break a communicator. The
 * marker has binary retention: it is read from the class files, where the compiler reads it.
 */
class RawSeamsOptInTest : FunSpec({
    fun binaryAnnotations(internalName: String): List<String> {
        val bytes = RawSeamsOptInTest::class.java.classLoader.getResourceAsStream("$internalName.class")!!.use { it.readAllBytes() }
        val model = ClassFile.of().parse(bytes)
        return model.findAttribute(Attributes.runtimeInvisibleAnnotations())
            .map { a -> a.annotations().map { it.className().stringValue() } }
            .orElse(emptyList())
    }

    test("JavaCppNcclApi, JavaCppCudaRuntime and JavaCppPlatform require the InternalTpcommApi opt-in") {
        for (c in listOf("dev/tpcomm/nccl/javacpp/JavaCppNcclApi", "dev/tpcomm/nccl/javacpp/JavaCppCudaRuntime", "dev/tpcomm/nccl/javacpp/JavaCppPlatform")) {
            binaryAnnotations(c).shouldContain("Ldev/tpcomm/InternalTpcommApi;")
        }
    }
})
