"""The lean engine the proxy runs on: mitmproxy's own layers, and every change the project
makes below mitmproxy's hooks.

`lean.py` is the engine (`LeanMaster`, `LeanOptions`, `lean_addons()`); `patches.py` is
the one list of the changes below mitmproxy's hooks, one row per change with what it
replaces, its decision, its stage, its install function and the test that pins it; the
other modules here are those changes, one each (`hookargs.py` is shared by two of them).
Nothing outside `patches.py` installs a change of this folder: the launcher, `LeanMaster`
and `CoalescingProxyserver.register_connection` call `patches.install(stage)` and
`patches.attach(handler)`, which walk the table in its order. Importing this package
imports nothing, so that the IMPORT stage can run before mitmproxy is loaded.

A hook that finished at once: three rows answer it, and they take it in this order.
1. `streamhooks` (D311): one of a request's four hooks (`requestheaders`, `request`,
   `responseheaders`, `response`), started inside its `HttpStream`. Finished without an
   error: the stream goes on at once; the hook never climbs the layers, so neither of
   the others sees it. Not finished, or a hook after a streamed body that ends its
   message: yielded as before, carrying its running task, and the next two apply.
2. `hooksinplace` (D314): any other hook, and a request hook that (1) passed up. The
   handler starts it in a task inside its own loop; if that task finished at once, the
   paused layer that yielded it takes the completion back itself (the handler's list,
   `DONE`) and resumes in place: no `HookCompleted` trip down the stack.
3. `inlinehooks` (D294): a completion that finished inside the handler's loop and that
   no layer took back in (2) is handed on by the `server_event` that started it, right
   after its own loop, not in a task of its own a loop turn later.
A hook whose addons waited (a lookup, a held body) is answered as mitmproxy answers it,
by its task, after the wait. Switching (1) off leaves (2) and (3) to answer request
hooks; switching (2) off leaves (3). A test that measures one of them switches off those
above it (tests/runtime/test_hooksinplace.py switches off (1)).
"""
