"""ResNet-50 as torchvision defines it (`torchvision.models.resnet50`, "v1.5": the stride on each first block's 3x3
convolution), layer for layer: 25,557,032 parameters with 1000 classes, 4.09 G multiply-adds per 224² image.

scalelab's own copy, not torchvision's: torchvision's wheels on PyPI are built against CUDA torch, and on a CPU
install (torch 2.13.0+cpu) `import torchvision` fails loading its operators; on a GPU cluster it must match torch's
build exactly. The parameter count and the multiply-adds are tested against torchvision's published figures.
"""

from torch import nn


class Bottleneck(nn.Module):
    """1x1 down to `width`, 3x3 (carrying the stride), 1x1 up to 4 x width; the shortcut projected where the shape
    changes."""

    expansion = 4

    def __init__(self, inplanes: int, width: int, stride: int = 1):
        super().__init__()
        out = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + identity)


class ResNet50(nn.Module):
    """The stem (7x7 stride 2, max-pool), four stages of 3, 4, 6, 3 bottlenecks, global average pool, one linear
    layer; torchvision's initialisation (Kaiming normal for convolutions, batch norms at 1 and 0)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages, inplanes = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layer = []
            for i in range(blocks):
                layer.append(Bottleneck(inplanes, width, stride if i == 0 else 1))
                inplanes = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layer))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))
