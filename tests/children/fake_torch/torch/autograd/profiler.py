class profile:
    def _prepare_trace(self):
        import torch.autograd as autograd

        autograd._enabled.append(1)

    def stop(self):
        import torch.autograd as autograd

        autograd._enabled.clear()
