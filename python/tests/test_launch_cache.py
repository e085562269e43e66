"""The prepared-binding cache of kir.torch's launcher (python/kir/_launch.py, _ops.py), on the
CPU: a stand-in for the native module records what is prepared and launched, and the tests
check that a call binds (with every check) only when something the binding depends on is new
(a shape, a stride, a dtype, a scalar, the op's constants), that every later call passes the
addresses of exactly the tensors it was given and of fresh outputs in the prepared order, and
that the cheap argument checks still name the argument. Needs PyTorch (CPU is enough); without
it the tests are skipped, loudly.
"""

import unittest

try:
    import torch
except ImportError:  # pragma: no cover - the CI venv has NumPy only
    torch = None
    print("\n*** SKIPPED: no torch: the launcher-cache tests did not run ***", flush=True)


class FakePrepared:
    """Records the launches of one prepared binding."""

    def __init__(self, names, ptrs, scalars):
        self.names, self.first, self.scalars, self.launches = names, ptrs, scalars, []

    def launch(self, ptrs, stream):
        self.launches.append((list(ptrs), stream))


class FakeLoaded:
    """The native `Loaded` for an entry `x -> y` (f32, x's shape) with an i32 temp `t` of [3]."""

    def __init__(self):
        self.prepared = []

    def buffer_specs(self, args, scalars):
        (name, _, _, shape, _) = args[0]
        c = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            c[i] = c[i + 1] * shape[i + 1]
        return [("y", "f32", list(shape), c, "out"), ("t", "i32", [3], [1], "temp")]

    def prepare(self, args, scalars):
        p = FakePrepared([a[0] for a in args], [a[1] for a in args], list(scalars))
        self.prepared.append(p)
        return p


@unittest.skipIf(torch is None, "needs torch")
class PlanCache(unittest.TestCase):
    def setUp(self):
        from kir import _launch, _ops

        self.launch, self.ops = _launch, _ops
        self.loaded = FakeLoaded()
        fake = _launch._Program(None, self.loaded)
        self.saved = (_ops.program, _launch._raw_stream)
        _ops.program = lambda op, consts, index, shapes: fake
        _launch._raw_stream = lambda index: 77
        _ops._plans.clear()

    def tearDown(self):
        self.ops.program, self.launch._raw_stream = self.saved
        self.ops._plans.clear()

    def call(self, x, scale=0.5, consts=(("DTYPE", "f32"),)):
        return self.ops.run_op("op", consts, ("x",), (x,), (("scale", scale),), x)

    def test_hits_reuse_the_binding_with_new_addresses(self):
        x = torch.randn(4, 6)
        (y,) = self.call(x)
        self.assertEqual(len(self.loaded.prepared), 1)
        p = self.loaded.prepared[0]
        self.assertEqual(p.names, ["x", "y", "t"])
        self.assertEqual(p.scalars, [("scale", 0.5)])
        self.assertEqual((y.shape, y.dtype), (torch.Size([4, 6]), torch.float32))
        x2 = torch.randn(4, 6)
        for _ in range(3):
            (y2,) = self.call(x2)
        self.assertEqual(len(self.loaded.prepared), 1, "same key: no new binding")
        ptrs, stream = p.launches[-1]
        self.assertEqual(stream, 77)
        self.assertEqual(len(ptrs), 3)
        self.assertEqual(ptrs[:2], [x2.data_ptr(), y2.data_ptr()])
        self.assertEqual(len(p.launches), 4)

    def test_what_the_binding_depends_on_makes_a_new_one(self):
        x = torch.randn(4, 6)
        self.call(x)
        self.call(torch.randn(5, 6))  # shape
        self.call(torch.randn(6, 4).t())  # same shape, other strides
        self.call(x.half())  # dtype
        self.call(x, scale=0.25)  # scalar
        self.call(x, consts=(("DTYPE", "f16"),))  # constants
        self.assertEqual(len(self.loaded.prepared), 6)
        self.call(torch.randn(6, 4).t())
        self.call(x, scale=0.25)
        self.assertEqual(len(self.loaded.prepared), 6)

    def test_checks_name_the_argument(self):
        from kir import InputError

        with self.assertRaises(InputError) as cm:
            self.ops.check("q", torch.randn(2, 2))
        self.assertEqual(cm.exception.argument, "q")
        self.assertIn("CUDA", str(cm.exception))
        with self.assertRaises(InputError) as cm:
            self.ops.check("k", [1.0])
        self.assertEqual(cm.exception.argument, "k")
        with self.assertRaises(InputError) as cm:
            self.ops.same(["a", "b"], [torch.randn(2), torch.randn(2).double()])
        self.assertEqual(cm.exception.argument, "b")

    def test_the_fast_path_takes_only_checked_eager_calls_without_gradients(self):
        x = torch.randn(4, 6)
        seen = self.ops.Seen()
        key = (self.ops.signature(x), 0.5)
        self.assertIsNone(seen.get(key, (x,)), "nothing checked yet")
        plan = self.ops.plan_for("op", (("DTYPE", "f32"),), ("x",), (x,), (("scale", 0.5),), x)
        seen.put(key, plan)
        self.assertIs(seen.get(key, (x,)), plan)
        (y,) = seen.get(key, (x,))((x,))
        self.assertEqual(self.loaded.prepared[0].launches[-1][0][:2], [x.data_ptr(), y.data_ptr()])
        # A tensor that needs a gradient goes through autograd; another key was never checked.
        self.assertIsNone(seen.get(key, (x.clone().requires_grad_(),)))
        other = (self.ops.signature(torch.randn(6, 4).t()), 0.5)
        self.assertNotEqual(other, key)
        self.assertIsNone(seen.get(other, (x,)))
        # A subclass of Tensor (a fake or functional tensor) never takes it.
        class Sub(torch.Tensor):
            pass

        self.assertIsNone(seen.get(key, (x.as_subclass(Sub),)))

    def test_an_unbatched_plan_takes_and_returns_2d_tensors(self):
        x3 = torch.randn(1, 4, 6)
        plan = self.ops.plan_for("op", (("DTYPE", "f32"),), ("x",), (x3,), (("scale", 0.5),), x3)
        flat = plan.unbatched()
        self.assertIs(flat.prepared, plan.prepared, "the same binding")
        x = torch.randn(4, 6)
        (y,) = flat((x,))
        self.assertEqual((y.shape, y.stride(), y.dtype), (torch.Size([4, 6]), (6, 1), torch.float32))
        ptrs = self.loaded.prepared[0].launches[-1][0]
        self.assertEqual(ptrs[:2], [x.data_ptr(), y.data_ptr()])
        # The temp keeps its shape; the batched plan still returns [1, 4, 6].
        self.assertEqual(flat.alloc[1][0], (3,))
        (y3,) = plan((x3,))
        self.assertEqual(y3.shape, torch.Size([1, 4, 6]))


if __name__ == "__main__":
    unittest.main()
