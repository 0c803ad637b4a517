from setuptools import find_packages, setup

version = {}
with open('mcnet_basicsr/version.py') as f:
    exec(f.read(), version)

with open('README.md', encoding='utf-8') as f:
    long_description = f.read()

setup(
    name='mcnet_basicsr',
    version=version['__version__'],
    description='Measurement-consistent super-resolution (MCNet) as a BasicSR plugin',
    long_description=long_description,
    long_description_content_type='text/markdown',
    packages=find_packages(include=['mcnet_basicsr', 'mcnet_basicsr.*']),
    py_modules=['mcnet_basicsr_hook'],
    include_package_data=True,
    package_data={
        'mcnet_basicsr': ['weights/*.pth', 'weights/*.md', 'zoo/assets.yml', 'zoo/models.yml', 'ops/degradations.yml']
    },
    python_requires='>=3.9',
    install_requires=[
        'basicsr==1.4.2',
        'torch',
        'torchvision',
        'opencv-python',
        'pyyaml',
        'lmdb',
        'numpy',
        'scipy',
        'scikit-image',
        'tqdm',
    ],
    # the versions the suite and the lint were run with (pytest 8.4 and 9.2, pytest-xdist 3.8, flake8 7.5, isort 9.0)
    extras_require={'test': ['pytest>=8.4,<10', 'pytest-xdist>=3.8,<4', 'flake8>=7.5,<8', 'isort>=9.0,<10']},
    entry_points={'console_scripts': ['mcnet-sr=mcnet_basicsr.cli.main:console_main']},
    license='Apache-2.0',
)
