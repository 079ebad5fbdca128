"""AOTInductor's rule: aoti_package and the loaders it generates from templates/."""
