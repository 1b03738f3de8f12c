"""A CUDA training script of the usual kind: what `opaudit lint` / `opaudit fix` port, and what
`opaudit trace` records as it is.

    python examples/train_cuda.py --epochs 1 --steps-per-epoch 4              # one process
    torchrun --nproc-per-node 8 examples/train_cuda.py --epochs 10            # DDP over NCCL
    opaudit trace -- examples/train_cuda.py --epochs 1 --steps-per-epoch 2    # what it runs

It trains a small ResNet-style classifier on synthetic images (nothing is downloaded), with the
habits of real CUDA code: device selection, `.cuda()`, cuDNN flags, AMP with a GradScaler, DDP with
the NCCL backend, pinned memory, CUDA events for timing, and a checkpoint saved with its device.
Without a GPU it falls back to the CPU (AMP and pinning off), so it runs anywhere.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SyntheticImages(Dataset):
    """Random images with labels that depend on them, so the loss can actually fall."""

    def __init__(self, size: int, num_classes: int = 10, image_size: int = 32):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(size, 3, image_size, image_size, generator=g)
        self.labels = (self.images.mean(dim=(1, 2, 3)) > 0).long() % num_classes

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(32, 32)
        self.layer2 = BasicBlock(32, 64, stride=2)
        self.layer3 = BasicBlock(64, 128, stride=2)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.dropout(x))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-cuda", action="store_true", help="train on the CPU even if CUDA is there")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--checkpoint", default="", help="where to save the final model (none by default)")
    return p.parse_args()


def setup_distributed():
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; a plain run is a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        return True, local_rank
    return False, 0


def main():
    args = parse_args()
    distributed, local_rank = setup_distributed()
    use_cuda = torch.cuda.is_available() and not args.no_cuda
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")

    torch.manual_seed(42)
    if use_cuda:
        torch.cuda.manual_seed_all(42)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = SmallResNet()
    if use_cuda:
        model = model.cuda()
    if distributed:
        model = DDP(model, device_ids=[local_rank])

    dataset = SyntheticImages(args.batch_size * args.steps_per_epoch)
    sampler = DistributedSampler(dataset) if distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                        num_workers=0, pin_memory=use_cuda, drop_last=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    amp = args.amp and use_cuda
    scaler = torch.cuda.amp.GradScaler(enabled=amp)

    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        if use_cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.time()
        total, seen = 0.0, 0
        for images, labels in loader:
            images = images.cuda(non_blocking=True) if use_cuda else images
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.cuda.amp.autocast(enabled=amp):
                loss = F.cross_entropy(model(images), labels)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            total += loss.item() * labels.size(0)
            seen += labels.size(0)
        if use_cuda:
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end) / 1000
            memory = f", peak memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
        else:
            elapsed, memory = time.time() - t0, ""
        if local_rank == 0:
            print(f"epoch {epoch}: loss {total / max(seen, 1):.4f}, {elapsed:.2f} s{memory}")

    if args.checkpoint and local_rank == 0:
        state = (model.module if distributed else model).state_dict()
        torch.save({"model": state, "device": str(device)}, args.checkpoint)
        reloaded = torch.load(args.checkpoint, map_location={"cuda:0": "cpu"})
        print(f"saved {len(reloaded['model'])} tensors to {args.checkpoint}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
