package dev.tpcomm

/**
 * Marks declarations that are public only so that tpcomm's own modules (the engine core, the
 * backends, the facades) can reach them across module boundaries. They are **not** for users:
 * they may change or disappear in any release, and some of them end a job or break a
 * communicator's invariants when called out of turn.
 *
 * Using one requires an explicit opt-in (`@OptIn(InternalTpcommApi::class)`); without it the
 * compiler reports an error. This is the same contract as kotlinx.coroutines'
 * `@InternalCoroutinesApi`.
 */
@MustBeDocumented
@Retention(AnnotationRetention.BINARY)
@RequiresOptIn(
    level = RequiresOptIn.Level.ERROR,
    message = "This is an internal tpcomm API that may change or break the communicator when used " +
        "directly; it is public only for tpcomm's own modules.",
)
@Target(
    AnnotationTarget.CLASS,
    AnnotationTarget.FUNCTION,
    AnnotationTarget.PROPERTY,
    AnnotationTarget.CONSTRUCTOR,
    AnnotationTarget.TYPEALIAS,
)
public annotation class InternalTpcommApi
